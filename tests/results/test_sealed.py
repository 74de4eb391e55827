"""A finished run's sealed table: read instead of cells/ while cells/ is what it was sealed from, never after."""

from __future__ import annotations

import os

from harness.results import sealed, store
from harness.results.schema import cell_table


def row(cid: str, repeat: int, tput: float) -> dict:
    return {"run_id": "r", "cell_id": cid, "repeat": repeat, "status": "ok", "throughput_img_per_s": tput}


def test_the_sealed_table_is_read_until_a_row_file_changes(tmp_path):
    for r in range(3):
        store.write_table(tmp_path / "cells" / f"c-r{r}.parquet", cell_table([row("c", r, 100.0 + r)]))
    assert sealed.seal_cells(tmp_path) == tmp_path / "cells.parquet"
    whole = store.read_sealed(tmp_path)
    assert whole is not None and whole.equals(store._read_dir(tmp_path / "cells", store.CELL_SCHEMA))
    assert store.read_cells(tmp_path, ["repeat", "throughput_img_per_s"]).to_pylist()[2] == \
        {"repeat": 2, "throughput_img_per_s": 102.0}
    # a row rewritten after sealing (an A/B's rerun): cells/ is the truth again
    store.write_table(tmp_path / "cells" / "c-r1.parquet", cell_table([row("c", 1, 50.0)]))
    os.utime(tmp_path / "cells" / "c-r1.parquet", ns=(1, 1))
    assert store.read_sealed(tmp_path) is None
    assert store.read_cells(tmp_path).column("throughput_img_per_s").to_pylist() == [100.0, 50.0, 102.0]
    # a row added (a resumed run before it seals again)
    sealed.seal_cells(tmp_path)
    store.write_table(tmp_path / "cells" / "c-r3.parquet", cell_table([row("c", 3, 103.0)]))
    assert store.read_cells(tmp_path).num_rows == 4
