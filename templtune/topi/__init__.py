"""Operator declarations (TVM's topi names): ``topi.nn.*``, broadcast ops, numpy references in
``topi.testing``."""

from __future__ import annotations

from templtune.topi import nn, tag, testing, utils
from templtune.topi.broadcast import add, divide, maximum, minimum, multiply, subtract
from templtune.topi.elemwise import exp, reshape, sigmoid, sqrt, tanh, transpose

__all__ = ["nn", "tag", "testing", "utils", "add", "subtract", "multiply", "divide", "maximum",
           "minimum", "exp", "sqrt", "tanh", "sigmoid", "reshape", "transpose"]
