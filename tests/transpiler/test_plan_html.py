"""DistributeTranspiler._repr_html_ (issue 17): the plan as Jupyter shows it, checked against the
plan and against the pserver programs the transpiler builds."""

from __future__ import annotations

from html.parser import HTMLParser

import numpy as np

from dask_fluid.transpiler import DistributeTranspiler

from .models import A, B, config, reference_mlp, table_net, transpile


class _Tables(HTMLParser):
    """The cell texts of every table, row by row, and the text outside tables."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: list[list[list[str]]] = []
        self.text: list[str] = []
        self._cell: list[str] | None = None

    def handle_starttag(self, tag, attrs):
        if tag == "table":
            self.tables.append([])
        elif tag == "tr":
            self.tables[-1].append([])
        elif tag in ("td", "th"):
            self._cell = []

    def handle_endtag(self, tag):
        if tag in ("td", "th"):
            self.tables[-1][-1].append("".join(self._cell))
            self._cell = None

    def handle_data(self, data):
        (self._cell if self._cell is not None else self.text).append(data)


def _parse(page: str) -> _Tables:
    parser = _Tables()
    parser.feed(page)
    return parser


def test_every_block_row_is_the_plans_block_on_its_pserver():
    main, startup, _ = reference_mlp()
    t = transpile(main, startup, config(min_block_size=8192))  # the 64x256 and 256x256 split
    page = _parse(t._repr_html_())
    title = "".join(page.text)
    assert "pserver mode, sync; 2 pserver(s), 2 trainer(s) (this is trainer 0)" in title
    servers, blocks = page.tables
    assert blocks[0] == ["parameter", "block", "rows", "shape", "elements", "size", "pserver",
                         "gradient"]
    expected = []
    for param, parts in t.param_blocks.items():
        for b, ep in zip(parts, t.param_endpoints[param], strict=True):
            first = b.offset // int(np.prod(b.full_shape[1:]))
            expected.append([param, str(b.index), f"{first:,}-{first + b.shape[0]:,}",
                             str(list(b.shape)), f"{b.size:,}", ep])
    assert [row[:5] + row[6:7] for row in blocks[1:]] == expected
    assert len({r[0] for r in blocks[1:]}) == 6 and "6 parameter(s) in 8 block(s)" in title
    assert [r for r in blocks[1:] if r[0] == "fc_1.w_0"][1][2] == "128-256"  # worked: 256 rows / 2
    assert blocks[1][5] == "1.0 KiB"  # fc_0.b_0: 256 float32
    # per pserver: what it holds is what its program declares, with the same shapes
    assert [row[0] for row in servers[1:]] == [A, B]
    for ep, n_blocks, elements, _, holds in servers[1:]:
        declared = t.get_pserver_program(ep).global_block().vars
        names = holds.split(", ")
        assert int(n_blocks) == len(names)
        assert all(name in declared and declared[name].persistable for name in names)
        assert int(elements.replace(",", "")) == sum(
            int(np.prod(declared[name].shape)) for name in names)


def test_the_mode_and_the_table_shards_are_shown():
    main, startup = table_net()
    t = transpile(main, startup, trainers=3, sync_mode=False)
    page = _parse(t._repr_html_())
    text = "".join(page.text)
    assert "pserver mode, async" in text and "3 trainer(s)" in text
    assert "distributed lookup table shared_w [1000, 64]" in text
    assert page.tables[-1][1:] == [[A, "id % 2 == 0", "[500, 64]"],
                                   [B, "id % 2 == 1", "[500, 64]"]]
    assert all("shared_w shard" in row[4] for row in page.tables[0][1:])


def test_before_transpile_and_in_nccl2_mode():
    assert "not transpiled yet" in DistributeTranspiler()._repr_html_()
    main, startup, _ = reference_mlp()
    t = DistributeTranspiler(config(mode="nccl2"))
    t.transpile(1, program=main, startup_program=startup,
                trainers="127.0.0.1:6170,127.0.0.1:6171", current_endpoint="127.0.0.1:6171")
    page = t._repr_html_()
    assert "nccl2 mode; 2 trainer(s), no pservers" in page
    assert "<li>127.0.0.1:6171 (this trainer)</li>" in page
