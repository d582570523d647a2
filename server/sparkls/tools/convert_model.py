"""`sparkls convert-model`: turn a GGUF model (the bundled default, or any) into an HF checkpoint.

vLLM cannot run GGUF on a CPU (its GGUF kernels need CUDA), and on a GPU a safetensors checkpoint
loads faster and runs unquantized. transformers reads the GGUF (it needs the `gguf` package),
dequantizes the weights and writes config, tokenizer and safetensors to a directory that
`modelPath` can name for `engine = "vllm"`, or that `vllm serve` can serve. No network access.
"""

from __future__ import annotations

import time
from pathlib import Path


def convert(gguf: Path, out: Path, dtype: str = "bfloat16") -> Path:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    t0 = time.perf_counter()
    kw = {"gguf_file": gguf.name}
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, **kw)
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, torch_dtype=getattr(torch, dtype), **kw)
    # The weights are dequantized to `dtype` on load, but transformers 5 keeps the GGUF quantization
    # marker and then refuses to save: drop it, the checkpoint is a plain one.
    for obj, attr in ((model, "hf_quantizer"), (model.config, "quantization_config")):
        if getattr(obj, attr, None) is not None:
            setattr(obj, attr, None)
    if hasattr(model, "is_quantized"):
        setattr(model, "is_quantized", False)  # noqa: B010 (a plain attribute the type stubs call a tensor)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    print(f"wrote {out} ({dtype}) from {gguf} in {time.perf_counter() - t0:.0f}s")
    return out


def run_convert(model_path: str, model: str, out: str, dtype: str) -> int:
    from sparkls.engine.model_files import ModelUnavailable, resolve_model_path

    try:
        gguf = Path(resolve_model_path(model_path, model))
    except ModelUnavailable as e:
        print(f"sparkls convert-model: {e}")
        return 1
    try:
        convert(gguf, Path(out), dtype)
    except ImportError as e:
        print(f"sparkls convert-model needs transformers and torch (with vllm) and pip install 'sparkls[convert]': {e}")
        return 1
    return 0
