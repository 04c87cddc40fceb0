"""Map pserver endpoints onto Dask workers (pure helpers, no cluster access).

``pservers`` may be given three ways:

- a **count** ``n``: the runtime picks the workers. With ``n`` no larger than the number of
  workers, the pservers go to the first ``n`` workers of the preferred order (the trainer workers
  first, so that a small cluster spreads pservers over the machines that hold data) and their
  endpoints are the worker addresses. With more pservers than workers the endpoints are labels
  ``pserver-{i}:{6174 + i}`` assigned to the workers in turn (a worker may hold several shards).
- a **list of worker addresses** (``"tcp://10.0.0.5:40123"``, or the same without the scheme):
  each pserver runs on that worker.
- Fluid-style **endpoints** (``"127.0.0.1:6174,127.0.0.1:6175"`` or a list): an endpoint equal
  to a worker address is that worker. The others are mapped by host when their host is the host
  of some worker (the endpoints of one host go to that host's workers in order, cycling when
  there are more endpoints than workers there); when no endpoint host is a worker host at all
  (labels from a script written for another cluster), they are assigned to the workers in order,
  cycling. An endpoint whose host has no worker while other endpoints do match by host, or a
  Dask-style address (with a scheme) that is not a worker, cannot be mapped: ``ValueError``.

The endpoint strings are kept as the Fluid endpoints of the transpile (error messages name them);
:class:`Placement` records the worker of each.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ...transpiler.config import _ENDPOINT, parse_endpoints

__all__ = ["Placement", "place_pservers", "split_address"]

DEFAULT_PORT = 6174


def split_address(address: str) -> tuple[str, str, str]:
    """``"tcp://10.0.0.5:40123"`` -> ``("tcp", "10.0.0.5", "40123")`` (scheme may be "")."""
    scheme, _, rest = address.rpartition("://")
    host, _, port = rest.rpartition(":")
    return scheme, host.strip("[]"), port


@dataclass(frozen=True)
class Placement:
    """Where each pserver runs.

    Attributes
    ----------
    endpoints : list of str
        The Fluid endpoints, in pserver order (``pserver_id`` = index).
    workers : list of str
        The Dask worker address of each endpoint.
    """

    endpoints: list[str]
    workers: list[str]

    def worker_of(self, endpoint: str) -> str:
        return self.workers[self.endpoints.index(endpoint)]

    def items(self) -> list[tuple[str, str]]:
        return list(zip(self.endpoints, self.workers, strict=True))


def _cycle(items: Sequence[str], n: int) -> list[str]:
    return [items[i % len(items)] for i in range(n)]


def place_pservers(pservers: int | str | Sequence[str], workers: Sequence[str],
                   preferred: Sequence[str] = ()) -> Placement:
    """Decide the endpoint and the worker of every pserver (rules in the module docstring).

    Parameters
    ----------
    pservers : int, str or sequence of str
        A count, worker addresses, or Fluid endpoints (comma-separated str or list).
    workers : sequence of str
        Addresses of the cluster's live workers.
    preferred : sequence of str
        Workers to use first when ``pservers`` is a count (the trainer workers).

    Returns
    -------
    Placement

    Raises
    ------
    ValueError
        Zero pservers, no workers, malformed or duplicate endpoints, or endpoints that cannot be
        mapped; the message lists the workers.
    """
    workers = sorted(workers)
    if not workers:
        raise ValueError("the cluster has no workers: start some before training")
    listing = f"the cluster's workers are {workers}"
    if isinstance(pservers, bool):
        raise TypeError(f"pservers must be a count, worker addresses or endpoints, got "
                        f"{pservers!r}")
    if isinstance(pservers, int):
        if pservers < 1:
            raise ValueError(f"pservers = {pservers} is not allowed: need at least 1 pserver")
        # a worker with several trainers is listed once
        first = [w for w in dict.fromkeys(preferred) if w in workers]
        order = first + [w for w in workers if w not in first]
        if pservers <= len(order) and all(_ENDPOINT.match(w) for w in order[:pservers]):
            chosen = order[:pservers]
            return Placement(list(chosen), list(chosen))
        labels = [f"pserver-{i}:{DEFAULT_PORT + i}" for i in range(pservers)]
        return Placement(labels, _cycle(order, pservers))
    endpoints = parse_endpoints(pservers, "pservers")
    by_bare = {w.split("://", 1)[-1]: w for w in workers}
    mapped: list[str | None] = []
    for ep in endpoints:
        if ep in workers:
            mapped.append(ep)
        elif "://" not in ep and ep in by_bare:
            mapped.append(by_bare[ep])
        elif "://" in ep:
            raise ValueError(f"pserver endpoint {ep!r} looks like a Dask worker address but no "
                             f"such worker is in the cluster; {listing}")
        else:
            mapped.append(None)
    rest = [i for i, w in enumerate(mapped) if w is None]
    if rest:
        hosts: dict[str, list[str]] = {}
        for w in workers:
            hosts.setdefault(split_address(w)[1], []).append(w)
        matching = [i for i in rest if split_address(endpoints[i])[1] in hosts]
        if matching:
            unmapped = [endpoints[i] for i in rest if i not in matching]
            if unmapped:
                raise ValueError(f"pserver endpoints {unmapped} name hosts where no Dask worker "
                                 f"runs (other endpoints were mapped by host); {listing}. Use "
                                 "worker addresses, or endpoints on the workers' hosts")
            used: dict[str, int] = {}
            for i in rest:
                host = split_address(endpoints[i])[1]
                k = used.get(host, 0)
                mapped[i] = hosts[host][k % len(hosts[host])]
                used[host] = k + 1
        else:
            for k, i in enumerate(rest):
                mapped[i] = workers[k % len(workers)]
    return Placement(list(endpoints), [str(w) for w in mapped])
