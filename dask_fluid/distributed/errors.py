"""Errors of distributed training: each names the role, the endpoint and the step that failed.

All of them pickle (they travel from a worker to the client, and from a parameter server to a
trainer), so each class implements ``__reduce__`` with its own constructor arguments.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "error_fields",
    "error_from_fields",
    "DeadlineExceededError",
    "DistributedTrainingError",
    "JobAbortedError",
    "RemoteError",
    "ServiceNotFoundError",
    "WorkerLostError",
    "with_detail",
    "with_step",
]


class DistributedTrainingError(RuntimeError):
    """A distributed training job failed on one role.

    Parameters
    ----------
    detail : str
        What went wrong, in one sentence.
    role : str
        ``"pserver"``, ``"trainer"`` or ``"rank"`` (a rank of a collective job): the role of the
        process at ``endpoint``.
    endpoint : str
        The Dask worker address or Fluid endpoint that failed or did not answer.
    step : int or None
        The training step, or None when the failure happened outside a step (job setup).

    Attributes
    ----------
    detail, role, endpoint, step
        As given.
    """

    hint = (
        "Check the log of the worker at that endpoint for the cause; the cluster stays usable, so "
        "fix the cause and start the job again."
    )

    def __init__(self, detail: str, role: str, endpoint: str, step: int | None = None) -> None:
        self.detail = detail
        self.role = role
        self.endpoint = endpoint
        self.step = step
        super().__init__(self._message())

    def _message(self) -> str:
        where = "outside a training step" if self.step is None else f"step {self.step}"
        detail = self.detail.rstrip(".")
        return f"{self.role} {self.endpoint} ({where}): {detail}. {self.hint}"

    def __reduce__(self):
        return (type(self), (self.detail, self.role, self.endpoint, self.step))


class DeadlineExceededError(DistributedTrainingError):
    """A remote call or a wait did not finish within ``FLAGS_rpc_deadline``.

    Parameters
    ----------
    detail, role, endpoint, step
        See :class:`DistributedTrainingError`.
    deadline_ms : int or float
        The deadline that expired, in milliseconds.
    """

    def __init__(
        self,
        detail: str,
        role: str,
        endpoint: str,
        step: int | None = None,
        deadline_ms: float = 0,
    ) -> None:
        self.deadline_ms = deadline_ms
        super().__init__(detail, role, endpoint, step)

    @property
    def hint(self) -> str:  # type: ignore[override]
        return (
            f"No answer within FLAGS_rpc_deadline = {self.deadline_ms:g} ms (dask.config key "
            "'dask_fluid.rpc.deadline'). If that process is alive but slow (a large model, a busy "
            "machine), raise the deadline; otherwise check its worker log for the cause."
        )

    def __reduce__(self):
        return (type(self), (self.detail, self.role, self.endpoint, self.step, self.deadline_ms))


class WorkerLostError(DistributedTrainingError):
    """The Dask worker that holds a role died or its connection broke."""

    hint = (
        "The worker at that endpoint died or became unreachable (look in its log and the "
        "nanny's log for a crash or the memory limit); the cluster stays usable, so start the "
        "job again once the worker is back."
    )


class JobAbortedError(DistributedTrainingError):
    """This role stopped waiting because another role of the same job failed first."""

    hint = (
        "Another role of the same job failed first; its error, raised from fit(), names the "
        "real cause."
    )


class RemoteError(DistributedTrainingError):
    """An exception raised by a remote service method, carried back as text.

    Parameters
    ----------
    detail, role, endpoint, step
        See :class:`DistributedTrainingError`.
    remote_type : str
        Qualified name of the remote exception's type, e.g. ``"builtins.ValueError"``.
    remote_message : str
        ``str()`` of the remote exception.
    remote_traceback : str
        The formatted remote traceback.
    """

    hint = "The traceback of the remote error is in the remote_traceback attribute."

    def __init__(
        self,
        detail: str,
        role: str,
        endpoint: str,
        step: int | None = None,
        remote_type: str = "",
        remote_message: str = "",
        remote_traceback: str = "",
    ) -> None:
        self.remote_type = remote_type
        self.remote_message = remote_message
        self.remote_traceback = remote_traceback
        super().__init__(detail, role, endpoint, step)

    def __reduce__(self):
        return (
            type(self),
            (
                self.detail,
                self.role,
                self.endpoint,
                self.step,
                self.remote_type,
                self.remote_message,
                self.remote_traceback,
            ),
        )


class ServiceNotFoundError(LookupError):
    """A worker holds no service of that name for that job (not attached yet, or closed).

    Raised by the worker-side lookup and carried back to the caller unchanged, so that a caller
    that started before its peer can retry until the service exists.
    """

    def __init__(self, job: str, service: str, worker: str) -> None:
        self.job = job
        self.service = service
        self.worker = worker
        super().__init__(
            f"worker {worker} has no service {service!r} for job {job!r}: it was not attached "
            "yet, or the job already ended on that worker"
        )

    def __reduce__(self):
        return (type(self), (self.job, self.service, self.worker))


def _classes() -> dict[str, type[DistributedTrainingError]]:
    return {c.__name__: c for c in (DistributedTrainingError, DeadlineExceededError,
                                    WorkerLostError, JobAbortedError, RemoteError)}


def error_fields(exc: BaseException) -> dict | None:
    """A training error as plain values (what the direct wire carries instead of a pickle);
    None for other exceptions."""
    if type(exc).__name__ not in _classes() or not isinstance(exc, DistributedTrainingError):
        return None
    args = exc.__reduce__()[1]
    return {"class": type(exc).__name__, "args": [a if isinstance(a, (str, int, float))
                                                  or a is None else str(a) for a in args]}


def error_from_fields(fields: object) -> DistributedTrainingError | None:
    """The inverse of :func:`error_fields` for the known classes; None for anything else
    (bytes from a socket never choose what code runs beyond these constructors)."""
    if not isinstance(fields, dict):
        return None
    cls = _classes().get(fields.get("class"))  # type: ignore[arg-type]
    args = fields.get("args")
    if cls is None or not isinstance(args, list) or not all(
            isinstance(a, (str, int, float)) or a is None for a in args):
        return None
    try:
        return cls(*args)
    except TypeError:
        return None


def with_step(err: DistributedTrainingError, step: int | None) -> DistributedTrainingError:
    """``err`` with ``step`` filled in when the failing role could not know it (a lost or frozen
    worker, seen by the launcher); ``err`` itself otherwise."""
    if err.step is not None or step is None:
        return err
    return _rebuilt(err, 3, step)


def with_detail(err: DistributedTrainingError, more: str) -> DistributedTrainingError:
    """``err`` with ``more`` added to its detail (what the launcher learnt about it)."""
    return _rebuilt(err, 0, f"{err.detail.rstrip('.')}; {more}")


def _rebuilt(err: DistributedTrainingError, index: int, value: Any) -> DistributedTrainingError:
    """A copy of ``err`` with constructor argument ``index`` replaced (``err`` itself when its
    class cannot be rebuilt so), caused by ``err``'s cause or by ``err``."""
    cls, args = err.__reduce__()
    args = list(args)
    args[index] = value
    try:
        new = cls(*args)
    except Exception:
        return err
    new.__cause__ = err.__cause__ or err
    return new
