"""vLLM parser plugins under Ray Serve LLM.

``vllm serve --tool-parser-plugin X`` imports X before it builds the chat handler. Ray Serve LLM
2.60 builds that handler itself (``init_app_state``) and never imports the plugin, so a parser
that the plugin registers is unknown in the replica. farm therefore passes a Ray Serve LLM
callback (``LLMConfig.callback_config``) whose construction, in the replica process and before
the engine starts, imports the named plugin modules.
"""

from __future__ import annotations

import importlib
from typing import Any

from ray.llm._internal.common.callbacks.base import CallbackBase

CALLBACK_CLASS = "farm.serve.plugins:ImportParserPlugins"


class ImportParserPlugins(CallbackBase):
    """Imports ``callback_kwargs.modules`` (dotted module names) when the replica starts."""

    def __init__(self, *args: Any, modules: list[str] | tuple[str, ...] = (), **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for name in modules:
            importlib.import_module(name)
