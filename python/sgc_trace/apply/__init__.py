"""Apply: sgc plans run by PyTorch.

`planner` plans a graph with the native module; `partitioner` splits a joint graph into
the forward and backward modules a plan describes, with its offloads (`offload`);
`torch_compile` is the `torch.compile` backend built on it (`backend()`), `step` the
whole-step convenience built on the same partitioner (`compile()`), and `sac` the plan as
a selective activation checkpointing policy for eager models (`policy()`)."""

from .partitioner import Boundary, Partition, partition
from .planner import PlanError, plan
from .sac import Block, Policy, policy
from .step import (PlanMismatch, PlannedStep, compile, distinct_bytes, input_specs, predicted_peak, tensor_bytes,
                   trace)
from .torch_compile import Backend, CompiledGraph, backend

__all__ = ["Backend", "CompiledGraph", "backend", "Block", "Policy", "policy", "Boundary", "Partition", "partition",
           "PlanError", "plan", "PlanMismatch", "PlannedStep", "compile", "distinct_bytes", "input_specs",
           "predicted_peak", "tensor_bytes", "trace"]
