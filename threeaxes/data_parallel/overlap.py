"""Data parallelism that overlaps the gradient all-reduces with backward."""
from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

import torch
import torch.nn as nn

from threeaxes import comms
from threeaxes.data_parallel.buckets import check_bucket_bytes, plan_buckets
from threeaxes.data_parallel.torch_options import DDP_OPTIONS, check_options, group_of_mesh
from threeaxes.dims import ParallelDims, dp_layout

if TYPE_CHECKING:
    from torch.distributed import ProcessGroup
    from torch.distributed.device_mesh import DeviceMesh

__all__ = ["BucketHooks", "DataParallel"]

_SECOND_BACKWARD = (
    "a second backward started before the gradients of the first were averaged; call "
    "model.finish_gradient_synchronization() after each loss.backward() (and before "
    "optimizer.step())")


class BucketHooks:
    """Start each bucket's communication from backward, as soon as its last gradient is in.

    The machinery `DataParallel` (an all-reduce per bucket) and ZeRO-2's
    `Zero2Optimizer` (a reduce-scatter per bucket) share. A post-accumulate-grad
    hook on every parameter counts the gradients of its bucket; when a bucket is
    full and every bucket before it has been launched, `launch(index, grads)`
    runs, with the bucket's gradients in bucket order (zeros for a parameter
    that got none this backward). Launching strictly in bucket order means every
    rank starts the same collectives in the same order, whatever order its hooks
    fire in. When a backward pass ends, the buckets still waiting (they hold a
    parameter nothing used) are launched too, so each rank makes one collective
    per bucket per backward.

    accumulate=False: one backward per step; the next backward before `done()`
    raises `second_backward` (a RuntimeError saying what to call). True:
    backwards may follow each other (gradient accumulation), each launching
    every bucket again.
    """

    def __init__(self, buckets: Iterable[Iterable[torch.Tensor]], launch: Callable[[int, list[torch.Tensor]], None], *,
                 accumulate: bool = False,
                 second_backward: str = "a second backward started before the first was finished") -> None:
        self.buckets, self.launch = [list(b) for b in buckets], launch
        self.accumulate, self.second_backward = accumulate, second_backward
        self._bucket_of = {p: index for index, bucket in enumerate(self.buckets) for p in bucket}
        self.backwards = 0           # backward passes ended since the last done()
        self._start_pass()
        self._handles = [p.register_post_accumulate_grad_hook(self._on_gradient_ready)
                         for bucket in self.buckets for p in bucket]

    def _start_pass(self) -> None:
        self._ready: set[torch.Tensor] = set()   # parameters whose gradient this backward produced
        self._filled = [0] * len(self.buckets)   # how many of each bucket's gradients are in
        self._next = 0                           # the first bucket not launched yet
        self._in_backward = False

    def _on_gradient_ready(self, param: torch.Tensor) -> None:
        """Hook: `param.grad` is final for this backward. Launch every full bucket whose turn has come."""
        if not self._in_backward:
            if self.backwards and not self.accumulate:
                raise RuntimeError(self.second_backward)
            self._in_backward = True
            # runs once, when this backward pass is over
            torch.autograd.Variable._execution_engine.queue_callback(self._end_of_backward)
        if param in self._ready:
            raise RuntimeError(self.second_backward)
        self._ready.add(param)
        self._filled[self._bucket_of[param]] += 1
        while self._next < len(self.buckets) and self._filled[self._next] == len(self.buckets[self._next]):
            self._launch_next()

    def _launch_next(self) -> None:
        index = self._next
        self._next += 1
        # a parameter unused on this rank (no gradient this backward) contributes zeros
        grads = [p.grad if p in self._ready and p.grad is not None else torch.zeros_like(p)
                 for p in self.buckets[index]]
        self.launch(index, grads)

    def _end_of_backward(self) -> None:
        while self._next < len(self.buckets):    # buckets holding a parameter nothing used
            self._launch_next()
        self.backwards += 1
        self._start_pass()

    def done(self) -> None:
        """The step's gradients have been dealt with: the next backward starts a new step."""
        self.backwards = 0

    def remove(self) -> None:
        for handle in self._handles:
            handle.remove()


class DataParallel(nn.Module):
    """Wrap `module` for pure data parallelism over the "dp" axis of `dims`; the rules
    are below.

    As DistributedDataParallel: with no `dims` and no current layout (no
    `ParallelDims.init`), every rank is one dp axis on the default process group;
    `process_group=` (a group of every rank, or the current layout's dp group) and
    a one-axis `device_mesh=` are taken, and `bucket_cap_mb=` too (DDP's size in
    MiB, for `bucket_bytes`). DDP's other options pass where they mean what
    happens here and are refused, saying what to do, where not
    (`torch_options.DDP_OPTIONS`).

    Where it differs from DDP on purpose, to show each step:
    * backward only starts the buckets' all-reduces: call
      `finish_gradient_synchronization()` after it (DDP waits inside backward);
    * the default is one bucket per parameter (`bucket_bytes=None`), not 25 MiB;
    * an unused parameter always counts as a zero gradient (DDP needs
      `find_unused_parameters=True`), and afterwards its `.grad` is the dp
      average, never None;
    * buffers are copied from the first replica once, when wrapping, not at
      every forward (DDP's `broadcast_buffers`).

    `step.average_gradients_bucketed` waits for the whole backward pass, then sends
    every bucket. But backward produces gradients from the last layer to the
    first, so the head's gradients are final long before the embeddings' are.
    `DataParallel` starts each bucket's all-reduce the moment its last gradient is
    ready (a hook on every parameter) and lets the backend send it in the
    background while autograd goes on computing the earlier layers. That is what
    PyTorch's `DistributedDataParallel` does.

        dims = ParallelDims.init(dp=4)
        model = DataParallel(ToyTransformer(cfg), bucket_bytes=2048)   # broadcasts rank 0's weights
        loss = lm_loss(model(inputs), targets)
        loss.backward()                           # buckets start their all-reduce as they fill
        model.finish_gradient_synchronization()   # wait, divide by dp, write back into .grad
        optimizer.step()

    The rules:

    * Buckets: the trainable parameters in the REVERSE of registration order
      (head first), grouped by `plan_buckets`, so the plan is exactly
      `gradient_buckets(model, bucket_bytes)`'s. `bucket_bytes=None` gives one
      bucket per parameter.
    * Launch order: buckets are launched strictly in bucket order. A bucket that is
      full waits for the ones before it. Every rank therefore starts the same
      collectives in the same order, even if its hooks fire in another order.
    * Frozen parameters (`requires_grad=False`) are in no bucket and never reduced.
    * Unused parameters (trainable, but no gradient in this backward) count as a
      zero gradient on this rank. Their bucket, and every bucket after it, is
      launched when the backward pass ends (as DDP does), so each rank still makes
      one all-reduce per bucket. Afterwards their `.grad` holds the dp average (zeros
      when no rank used them), never None.
    * One backward per step: a second backward before
      `finish_gradient_synchronization()` raises a RuntimeError that says so.

    The hooks and the launch order are `BucketHooks`, which ZeRO-2
    (`threeaxes.sharding.Zero2Optimizer`) uses too, with a reduce-scatter.
    """

    def __init__(self, module: nn.Module, bucket_bytes: int | None = None, dims: ParallelDims | None = None, *,
                 launch_bucket: Callable[[list[torch.Tensor], ParallelDims], tuple[torch.Tensor, Any]] | None = None,
                 process_group: ProcessGroup | None = None, device_mesh: DeviceMesh | None = None,
                 bucket_cap_mb: float | None = None, **ddp_options: Any) -> None:
        """`launch_bucket`, like DDP's `register_comm_hook`, replaces how a full
        bucket is reduced: `launch_bucket(grads, dims) -> (flat, pending)` gets the
        bucket's gradients (in bucket order) and must start the reduction without
        waiting for it; after `pending.wait()`, `flat` (1-d, all the gradients one
        after the other) must hold their MEAN over the dp ranks. None: sum with
        `comms.all_reduce(..., async_op=True)` now, divide by dp when finishing."""
        super().__init__()
        check_options("DataParallel", ddp_options, DDP_OPTIONS)
        if bucket_cap_mb is not None:
            if bucket_bytes is not None:
                raise ValueError("pass bucket_bytes= or bucket_cap_mb= (DDP's, in MiB), not both")
            bucket_bytes = int(bucket_cap_mb * 2**20)   # as DDP turns it into bytes
        if bucket_bytes is not None:
            check_bucket_bytes(bucket_bytes)
        if device_mesh is not None:
            if process_group is not None:
                raise ValueError("pass process_group= or device_mesh=, not both (as DDP)")
            process_group = group_of_mesh(device_mesh, "DataParallel")
        self.module = module
        self._launch_bucket = launch_bucket
        self.dims = dp_layout(dims, process_group)
        self.bucket_bytes = bucket_bytes
        self._broadcast_from_first_replica()

        names = {p: n for n, p in module.named_parameters()}
        trainable = [p for p in module.parameters() if p.requires_grad][::-1]  # head first
        dtypes = {p.dtype for p in trainable}
        if bucket_bytes is not None and len(dtypes) > 1:
            raise ValueError(f"the parameters have dtypes {sorted(map(str, dtypes))}; a bucket is one "
                             f"flat buffer, so give the model a single dtype (e.g. model.double()) "
                             f"or pass bucket_bytes=None (one all-reduce per parameter)")
        if bucket_bytes is None:
            plan = [[i] for i in range(len(trainable))]
        else:
            plan = plan_buckets([p.numel() * p.element_size() for p in trainable], bucket_bytes)
        self._buckets = [[trainable[i] for i in bucket] for bucket in plan]
        self.bucket_names = [[names[p] for p in bucket] for bucket in self._buckets]
        self.bucket_sizes_bytes = [sum(p.numel() * p.element_size() for p in bucket)
                                   for bucket in self._buckets]
        # (bucket index, flat buffer, comms.Pending or None, divisor) in flight
        self._pending: list[tuple[int, torch.Tensor, Any, int]] = []
        self._hooks = BucketHooks(self._buckets, self._launch, second_backward=_SECOND_BACKWARD)

    # -- building ---------------------------------------------------------------------

    def _broadcast_from_first_replica(self) -> None:
        """Every dp replica starts from the weights of dp coordinate 0."""
        if self.dims.dp == 1:
            return
        first = self.dims.ranks("dp")[0]
        with torch.no_grad():
            for tensor in itertools.chain(self.module.parameters(), self.module.buffers()):
                # communication: copy dp coordinate 0's tensor to every replica
                comms.broadcast(tensor.data, "dp", src=first, dims=self.dims)

    # -- during backward --------------------------------------------------------------

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return self.module(*args, **kwargs)

    def _launch(self, index: int, grads: list[torch.Tensor]) -> None:
        """BucketHooks' launch: copy bucket `index`'s gradients into one flat buffer
        and start its all-reduce (or the student's `launch_bucket`)."""
        if self._launch_bucket is not None:
            flat, pending = _checked(self._launch_bucket(grads, self.dims), self._buckets[index])
            self._pending.append((index, flat, pending, 1))  # the hook delivers the mean
            return
        flat = torch.cat([g.reshape(-1) for g in grads])  # (sum of the bucket's numels,)
        if self.dims.dp > 1:
            # communication: start summing this bucket over the dp ranks; backward goes on meanwhile
            pending = comms.all_reduce(flat, "dp", dims=self.dims, async_op=True)
        else:
            pending = None  # one replica: nothing to average
        self._pending.append((index, flat, pending, self.dims.dp))

    # -- after backward -----------------------------------------------------------------

    def finish_gradient_synchronization(self) -> None:
        """Wait for every bucket's all-reduce, divide by dp and write each bucket's
        slices back into the parameters' `.grad`. Call after `loss.backward()`,
        before `optimizer.step()`, on every rank."""
        if not self._hooks.backwards:
            raise RuntimeError("finish_gradient_synchronization() found no gradient since the last "
                               "call; run loss.backward() on the wrapped model first")
        for index, flat, pending, divide_by in self._pending:
            if pending is not None:
                pending.wait()  # communication: this bucket's reduction has arrived
            if divide_by != 1:
                flat.div_(divide_by)
            bucket = self._buckets[index]
            for param, piece in zip(bucket, flat.split([p.numel() for p in bucket])):
                if param.grad is None:   # unused on this rank: it gets the average too
                    param.grad = piece.view_as(param).clone()
                else:
                    param.grad.copy_(piece.view_as(param))
        self._pending.clear()
        self._hooks.done()

    def extra_repr(self) -> str:
        size = "one per parameter" if self.bucket_bytes is None else f"{self.bucket_bytes:,} bytes"
        return f"dp={self.dims.dp}, buckets={len(self._buckets)} ({size})"


def _checked(result: object, bucket: Sequence[torch.Tensor]) -> tuple[torch.Tensor, Any]:
    """`launch_bucket`'s (flat, pending), or a TypeError that says what it must return."""
    numel = sum(p.numel() for p in bucket)
    if type(result) is not tuple or len(result) != 2:
        raise TypeError(f"launch_bucket returned {type(result).__name__}; return a pair (flat, pending): "
                        f"the flat buffer and what comms.all_reduce(flat, 'dp', dims=dims, "
                        f"async_op=True) returned")
    flat, pending = result
    if not isinstance(flat, torch.Tensor) or flat.dim() != 1 or flat.numel() != numel:
        raise TypeError(f"launch_bucket's flat buffer should be a 1-d tensor of the bucket's "
                        f"{numel} gradient numbers (torch.cat of the flattened grads), got "
                        f"{tuple(flat.shape) if isinstance(flat, torch.Tensor) else type(flat).__name__}")
    if not callable(getattr(pending, "wait", None)):
        raise TypeError(f"launch_bucket's pending is a {type(pending).__name__}, which has no wait(); "
                        f"return what comms.all_reduce(..., async_op=True) returned")
    return flat, pending
