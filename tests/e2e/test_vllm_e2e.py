"""`engine = "vllm"` end to end: the real server over stdio, vLLM in-process on a tiny local model."""

from __future__ import annotations

import pytest

from tests.conftest import require
from tests.e2e import engine_cases
from tests.e2e.lsp_client import lsp
from tests.servers import VLLM_TEST_ENV

pytestmark = pytest.mark.vllm


async def test_vllm_engine_serves_inline_and_classic_completion_and_aborts_on_cancel(tiny_model):
    require("vllm", "the vllm engine")
    opts = {"engine": "vllm", "modelPath": str(tiny_model), "vllmBlockSize": 32, "vllmKvCacheMb": 256,
            "maxTokensMultiLine": 3000, "maxLines": 500}
    async with lsp(options=opts, env=VLLM_TEST_ENV) as (c, _):
        await engine_cases.inline_and_classic_completion_are_served(c, "vllm")
        await engine_cases.cancel_request_aborts_the_engine(c, "vllm", 3000)
