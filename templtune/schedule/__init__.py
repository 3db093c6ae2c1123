"""Schedules: stages, loop transformations and data-flow rewrites (TVM's ``te.Schedule``),
and bound inference (:func:`infer_bound`: regions of attached stages and every loop extent)."""

from templtune.schedule.bound import BoundResult, StageBound, infer_bound
from templtune.schedule.relations import Fuse, IterVarAttr, Rebase, Split
from templtune.schedule.schedule import Schedule, create_schedule
from templtune.schedule.stage import Stage

__all__ = ["Schedule", "Stage", "create_schedule", "Split", "Fuse", "Rebase",
           "IterVarAttr", "infer_bound", "BoundResult", "StageBound"]
