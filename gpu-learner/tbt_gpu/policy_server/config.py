"""The policy server's configuration."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(kw_only=True, slots=True)
class ServerConfig:
    model: Path
    """Folder with config.json, *.safetensors and tokenizer files (e.g. ``ensure_model()``)."""
    host: str = "127.0.0.1"
    """Interface to bind; keep it on loopback: only /reload_weights is authenticated, inference is open."""
    port: int = 8000
    """TCP port; 0 picks a free one (the chosen port is logged)."""
    max_batch: int = 8
    """Most requests generated together in one batch."""
    batch_wait_ms: float = 10.0
    """After the first queued request, how long to wait for others to join its batch."""
    threads: int = 2
    """torch CPU threads for the forward passes."""
    max_model_len: int | None = None
    """Context length (prompt + max_tokens); defaults to the model's max_position_embeddings."""
    served_model_name: str | None = None
    """Model id in /v1/models and responses; defaults to the model folder's name."""
    chat_template: Path | None = None
    """Jinja file (or tokenizer_config-style JSON) replacing the tokenizer's chat template."""
    token_file: Path | None = None
    """File (mode 0600) with the bearer token of the weight-sync routes; unset = they are disabled."""
    weights_roots: tuple[Path, ...] = ()
    """Folders weights may be reloaded from (exports, the base model); a path outside them is refused."""

    def __post_init__(self) -> None:
        if not (self.model / "config.json").is_file():
            raise ValueError(f"model: {self.model} has no config.json")
        if not 0 <= self.port <= 65535:
            raise ValueError(f"port: {self.port} is not a TCP port")
        if self.max_batch < 1:
            raise ValueError(f"max_batch: must be >= 1, got {self.max_batch}")
        if self.batch_wait_ms < 0:
            raise ValueError(f"batch_wait_ms: must be >= 0, got {self.batch_wait_ms}")
        if self.threads < 1:
            raise ValueError(f"threads: must be >= 1, got {self.threads}")
        if self.max_model_len is not None and self.max_model_len < 2:
            raise ValueError(f"max_model_len: must be >= 2, got {self.max_model_len}")
        if self.chat_template is not None and not self.chat_template.is_file():
            raise ValueError(f"chat_template: {self.chat_template} is not a file")
        if self.token_file is not None:
            if not self.token_file.is_file():
                raise ValueError(f"token_file: {self.token_file} is not a file")
            if self.token_file.stat().st_mode & 0o077:
                raise ValueError(f"token_file: {self.token_file} is readable by others; chmod 600 it")
            if not self.token_file.read_text(encoding="utf-8").strip():
                raise ValueError(f"token_file: {self.token_file} is empty")

    @property
    def model_name(self) -> str:
        return self.served_model_name or self.model.name
