"""Tables as named numpy columns, read from CSV/Parquet and written to Parquet with pyarrow, without pandas.

Why by hand: pyarrow imports pandas (about 0.4 s, more than numpy and the whole metric engine on a small
file) the first time it converts between Arrow and numpy (`to_numpy`, `pa.array`), only to check for pandas
types. Building and reading Arrow buffers directly avoids that import; `benchmark evaluate` on a small file
then starts in about half the time. Conversions follow pandas.read_csv: integer columns with missing values
become float64 with NaN, text and other columns become object arrays with None for missing."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import pyarrow as pa
    from numpy.typing import ArrayLike

#: pandas.read_csv's default missing-value tokens, so that a file reads as it would with pandas.
NA_TOKENS = ("", "#N/A", "#N/A N/A", "#NA", "-1.#IND", "-1.#QNAN", "-NaN", "-nan", "1.#IND", "1.#QNAN", "<NA>", "N/A",
             "NA", "NULL", "NaN", "None", "n/a", "nan", "null")


def _bits(buf: pa.Buffer, offset: int, n: int) -> np.ndarray:
    return np.unpackbits(np.frombuffer(buf, dtype=np.uint8), bitorder="little")[offset:offset + n].astype(bool)


def _numeric_dtype(t: pa.DataType) -> np.dtype | None:
    import pyarrow as pa

    if pa.types.is_integer(t):
        return np.dtype(f"{'u' if pa.types.is_unsigned_integer(t) else ''}int{t.bit_width}")
    if pa.types.is_floating(t):
        return np.dtype(f"float{t.bit_width}")
    return None


def arrow_to_numpy(column: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """One Arrow column (chunked or not) as a numpy array, pandas.read_csv-style (see the module docstring)."""
    import pyarrow as pa

    arr = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    n, t = len(arr), arr.type
    valid = _bits(arr.buffers()[0], arr.offset, n) if arr.null_count else None
    dtype = _numeric_dtype(t)
    if dtype is not None:
        values: np.ndarray = np.frombuffer(arr.buffers()[1], dtype=dtype, count=n,
                                           offset=arr.offset * dtype.itemsize).copy()
        if valid is None:
            return values
        values = values.astype(np.float64)
        values[~valid] = np.nan
        return values
    if pa.types.is_boolean(t) and valid is None:
        return _bits(arr.buffers()[1], arr.offset, n)
    out = np.empty(n, dtype=object)
    for i, v in enumerate(arr.to_pylist()):  # text, lists, dates, booleans with nulls
        out[i] = v
    return out


def _object_to_arrow(values: np.ndarray) -> pa.Array:
    import pyarrow as pa

    items = values.tolist()
    present = [v for v in items if not _missing(v)]
    if present and all(isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, (bool, np.bool_))
                       for v in present):
        return numpy_to_arrow(np.array([np.nan if _missing(v) else float(v) for v in items]))
    text = [None if _missing(v) else str(v) for v in items]
    enc = [b"" if s is None else s.encode("utf-8") for s in text]
    offsets = np.zeros(len(enc) + 1, dtype=np.int64)
    offsets[1:] = np.cumsum([len(e) for e in enc])
    valid = np.array([s is not None for s in text])
    return pa.Array.from_buffers(pa.large_string(), len(enc), [pa.py_buffer(np.packbits(valid, bitorder="little")),
                                                               pa.py_buffer(offsets), pa.py_buffer(b"".join(enc))],
                                 null_count=int((~valid).sum()))


def _missing(v: object) -> bool:
    return v is None or (isinstance(v, (float, np.floating)) and np.isnan(v))


def numpy_to_arrow(values: ArrayLike) -> pa.Array:
    """A numpy column as an Arrow array: numbers and booleans as they are (NaN kept), text (str or object)
    as strings with None/NaN as null, object columns of numbers as numbers."""
    import pyarrow as pa

    values = np.asarray(values)
    if values.ndim != 1:
        raise ValueError(f"columns must be 1-D, got shape {values.shape}")
    if values.dtype == bool:
        return pa.Array.from_buffers(pa.bool_(), len(values),
                                     [None, pa.py_buffer(np.packbits(values, bitorder="little"))])
    if values.dtype.kind in "iuf":
        data = np.ascontiguousarray(values)
        arrow_type = {"i": pa.int64, "u": pa.uint64, "f": pa.float64}[values.dtype.kind]()
        data = data.astype({"i": np.int64, "u": np.uint64, "f": np.float64}[values.dtype.kind], copy=False)
        return pa.Array.from_buffers(arrow_type, len(data), [None, pa.py_buffer(data)])
    return _object_to_arrow(values.astype(object))


def read_columns(path: Path, kind: str) -> dict[str, np.ndarray]:
    """A Parquet file (`kind` 'parquet') or a delimited text file (`kind` = its delimiter) as numpy columns."""
    import pyarrow as pa  # noqa: F401  (pyarrow.csv / parquet need it loaded)

    if kind == "parquet":
        import pyarrow.parquet as pq

        table = pq.read_table(path)
    else:
        from pyarrow import csv

        table = csv.read_csv(path, parse_options=csv.ParseOptions(delimiter=kind),
                             convert_options=csv.ConvertOptions(null_values=list(NA_TOKENS), strings_can_be_null=True))
    return {name: arrow_to_numpy(col) for name, col in zip(table.column_names, table.columns)}


def write_parquet_columns(path: Path | str, columns: dict[str, np.ndarray]) -> None:
    """Write named numpy columns as one Parquet file (not atomic: see engine.store.write_columns)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    names = list(columns)
    pq.write_table(pa.Table.from_arrays([numpy_to_arrow(columns[k]) for k in names], names=names), path)
