"""AutoTVM-style tuners: grid search, random search, genetic algorithm (model-based ones join here)."""

from .ga_tuner import GATuner
from .index_based import GridSearchTuner, IndexBaseTuner, RandomTuner
from .tuner import Tuner

__all__ = ["GATuner", "GridSearchTuner", "IndexBaseTuner", "RandomTuner", "Tuner"]
