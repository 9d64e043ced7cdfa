"""The language-model token stream: windows and their batches."""

import numpy as np

from mintransformer.data.windows import WindowBatches, make_windows


def test_windows_cover_every_next_token_pair_once():
    stream = np.arange(20)
    windows = make_windows(stream, 6)
    assert windows.tolist() == [list(range(0, 7)), list(range(6, 13)), list(range(12, 19))]
    batches = WindowBatches(np.arange(50)[:, None].repeat(7, 1), 16, shuffle=True, seed=3)
    sizes = [len(batches[i][0]) for i in range(len(batches))]
    assert sizes == [2, 16, 16, 16]  # the odd batch first (see WindowBatches)
    assert [batches.rows(i) for i in range(len(batches))] == sizes
    seen = np.concatenate([batches[i][0][:, 0] for i in range(len(batches))])
    assert sorted(seen.tolist()) == list(range(50))
