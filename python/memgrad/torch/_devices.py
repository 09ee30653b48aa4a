"""A plan and an executor per torch device, made on first use: what both
captures (capture.py's ATen one and fx.py's) keep for the devices a
module runs on. A CUDA plan lends cuBLAS room a CPU plan does not, so a
plan is compiled per device, not shared."""
import torch

from .. import Executor


class PerDevice:
    """Mixed into a capture that has graph, plan_outputs and
    budget_bytes; keeps self.plans and self.executors by device kind."""

    def executor_for(self, device):
        """The executor for torch device `device` ("cpu" or "cuda")."""
        kind = torch.device(device).type
        if kind not in self.executors:
            if kind not in ("cpu", "cuda"):
                raise NotImplementedError(
                    "memgrad.torch: tensors on %s; memgrad runs on the CPU "
                    "and on CUDA" % kind)
            self.executors[kind] = Executor(wrap=torch.from_dlpack,
                                            device=kind)
        return self.executors[kind]

    def plan_for(self, device):
        """The plan for torch device `device`, compiled on first use."""
        kind = torch.device(device).type
        if kind not in self.plans:
            # what policy budget chose to offload, at its rates (a
            # capture without offload has none)
            off = getattr(self, "offload", None)
            bw, rate = off or (0.0, 0.0)
            self.plans[kind] = self.graph.compile(
                self.plan_outputs, budget_bytes=self.budget_bytes,
                device=kind if kind in ("cpu", "cuda") else "cpu",
                offload=getattr(self, "offload_tensors", ()),
                host_bandwidth=bw, compute_rate=rate)
        return self.plans[kind]
