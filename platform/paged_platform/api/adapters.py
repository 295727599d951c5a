"""`spec.adapters`: LoRA adapters every replica serves next to the base model, each a model name of its own.

An adapter's `source` is one of the model's own source types (`huggingFace`, `s3`, `path`, `image`), rendered the
same way: downloaded by an init container, or mounted read-only from a claim or an image. The adapter must be a
PEFT LoRA folder (`adapter_config.json` + `adapter_model.safetensors`) trained for the base model.
"""

from __future__ import annotations

from pydantic import Field

from paged_platform.api.base import ApiModel, cel
from paged_platform.api.model_source import HuggingFaceModel, ImageModel, PathModel, S3Model

#: The engine's rule for adapter names (model names in the OpenAI API, label values in Prometheus).
ADAPTER_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:/-]{0,127}$"
MAX_ADAPTERS = 16
_SOURCES = ("huggingFace", "s3", "path", "image")


class AdapterSource(ApiModel):
    """Where an adapter's PEFT folder comes from: exactly one of `huggingFace`, `s3`, `path` and `image`."""

    hugging_face: HuggingFaceModel | None = None
    s3: S3Model | None = None
    path: PathModel | None = None
    image: ImageModel | None = None

    def given(self) -> HuggingFaceModel | S3Model | PathModel | ImageModel:
        source = self.hugging_face or self.s3 or self.path or self.image
        assert source is not None  # the CEL rule requires one
        return source

    @cel(" + ".join(f"(has(self.{s}) ? 1 : 0)" for s in _SOURCES) + " == 1",
         "an adapter's source gives exactly one of huggingFace, s3, path and image")  # fmt: skip
    def _one_source(self) -> bool:
        return sum(s is not None for s in (self.hugging_face, self.s3, self.path, self.image)) == 1


class Adapter(ApiModel):
    """One LoRA adapter: clients select it with `model: <name>`."""

    name: str = Field(max_length=128, pattern=ADAPTER_NAME_PATTERN)
    source: AdapterSource
