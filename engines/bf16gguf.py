"""The 16-bit copy of a GGUF model (engines/bf16file.py) as a BF16 GGUF file of its own, so that
llama.cpp runs the very weights our 16-bit target runs (bench.tools.engine_check's peer): every
quantized tensor dequantized and rounded to bfloat16 (BF16), every float tensor rounded to
bfloat16 and kept as F32 (llama.cpp keeps norms in F32), the metadata copied with the file type
set to BF16. Rows stay in the file's order (llama.cpp's rotary layout). Cached beside the 16-bit
copy, named by the source file's hash.

    path = bf16gguf.written(path_to_gguf)
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import torch

from engines import bf16file, gguf


def written(src: str | Path) -> Path:
    """The BF16 GGUF of the file at `src`, written on the first call."""
    src = Path(src)
    out = bf16file.cached(src).with_suffix(".BF16.gguf")
    if not out.exists():
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_suffix(f".{os.getpid()}.tmp")
        write(src, tmp)
        os.replace(tmp, out)
    return out


def write(src: Path, dst: Path) -> None:
    import gguf as lib

    reader = lib.GGUFReader(str(src))
    arch = reader.fields["general.architecture"].contents()
    writer = lib.GGUFWriter(str(dst), arch)
    for field in reader.fields.values():
        if field.name in ("general.architecture", "general.file_type"):
            continue
        if field.name.startswith("GGUF."):
            continue
        vtype = field.types[0]
        sub = field.types[-1] if vtype == lib.GGUFValueType.ARRAY else None
        writer.add_key_value(field.name, field.contents(), vtype, sub_type=sub)
    writer.add_file_type(lib.LlamaFileType.MOSTLY_BF16)
    for t in reader.tensors:
        w = gguf.stored(t, src)
        blocks = isinstance(w, (gguf.Q4_1, gguf.Q8_0))
        values = (w.dequantize() if blocks else w).to(torch.bfloat16)
        if blocks:  # quantized blocks: BF16
            bits = values.view(torch.int16).numpy().view(np.uint16)
            writer.add_tensor(t.name, bits, raw_dtype=lib.GGMLQuantizationType.BF16)
        else:  # norms: F32 holding the bfloat16 values
            writer.add_tensor(t.name, values.float().numpy())
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
