"""Usage adapters (lp, anomaly, lora, clip-zs, clip-adapt, sam-prompt, sam-decoder, samed), registered in USAGES by
importing their modules."""

from fairmedbench.adapters import (  # noqa: F401 (they register)
    anomaly,
    clip_adapt,
    clip_zeroshot,
    linear_probe,
    lora,
    sam_decoder,
    sam_prompt,
    samed,
)
from fairmedbench.adapters.base import USAGES, Prepared, RunContext, Usage, compatible_usages, register_usage

__all__ = ["USAGES", "Prepared", "RunContext", "Usage", "compatible_usages", "register_usage"]
