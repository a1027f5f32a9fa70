"""Hugging Face config.json files as models: every listed architecture to its published size,
MoE and MLA shapes by hand, and what cannot be modelled refused by name."""

import json
from pathlib import Path

import pytest

from batchlab.cli import main
from batchlab.errors import InputError
from batchlab.hardware import resolve_model
from batchlab.hardware.hf_config import load_hf_config
from batchlab.hardware.presets import CONFIG_PRESETS

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = ROOT / "src" / "batchlab" / "data" / "models"
TEST_CONFIGS = ROOT / "tests" / "data" / "hf"

# Parameters as the model cards and Hugging Face's safetensors metadata publish them.
PUBLISHED = {
    "meta-llama__Llama-2-7b-hf": 6.74e9,            # Llama 2 paper, Table 1
    "meta-llama__Meta-Llama-3-8B": 8.03e9,          # model card
    "meta-llama__Llama-3.1-8B": 8.03e9,             # model card
    "meta-llama__Llama-3.2-1B": 1.24e9,             # model card (1.23B)
    "meta-llama__Llama-3.2-3B": 3.21e9,             # model card
    "meta-llama__Llama-3.3-70B-Instruct": 70.6e9,   # model card (70B), safetensors 70.6B
    "mistralai__Mistral-7B-v0.1": 7.24e9,           # safetensors
    "mistralai__Mixtral-8x7B-v0.1": 46.7e9,         # Mixtral paper: 47B total, 13B active
    "Qwen__Qwen2.5-7B-Instruct": 7.61e9,            # model card: 7.61B
    "Qwen__Qwen2.5-72B-Instruct": 72.7e9,           # model card: 72.7B
    "Qwen__Qwen3-8B": 8.2e9,                        # model card: 8.2B
    "Qwen__Qwen3-30B-A3B": 30.5e9,                  # model card: 30.5B total, 3.3B activated
    "Qwen__Qwen3-235B-A22B": 235e9,                 # model card: 235B total, 22B activated
    "deepseek-ai__DeepSeek-V2": 236e9,              # DeepSeek-V2 paper: 236B, 21B activated
    "deepseek-ai__DeepSeek-V3": 671e9,              # DeepSeek-V3 report: 671B, 37B activated
    "deepseek-ai__DeepSeek-R1": 671e9,              # the V3 architecture
    "openai__gpt-oss-120b": 116.83e9,               # model card: 116.83B total, 5.13B active
    "openai__gpt-oss-20b": 20.91e9,                 # model card: 20.91B total, 3.61B active
    "google__gemma-2-9b": 9.24e9,                   # safetensors: 9.24B
    "google__gemma-3-1b-it": 1.0e9,                 # safetensors: 1.0B
    "google__gemma-3-27b-it": 27.4e9,               # safetensors: 27.4B (vision tower included)
    "microsoft__Phi-3-mini-4k-instruct": 3.82e9,    # model card: 3.8B; safetensors 3.82B
    "microsoft__phi-2": 2.78e9,                     # safetensors: 2.78B (model card: 2.7B)
}
# Activated parameters where published: the experts a token reaches and the vocabulary
# matrices each publisher counts (Mistral and Qwen the embedding and the LM head, OpenAI and
# DeepSeek the LM head alone).
ACTIVE = {"mistralai__Mixtral-8x7B-v0.1": (12.9e9, 2), "Qwen__Qwen3-30B-A3B": (3.3e9, 2),
          "Qwen__Qwen3-235B-A22B": (22e9, 2), "deepseek-ai__DeepSeek-V3": (37e9, 1),
          "openai__gpt-oss-120b": (5.13e9, 1), "openai__gpt-oss-20b": (3.61e9, 1)}


def config_file(stem: str) -> Path:
    return SHIPPED / f"{stem}.json" if (SHIPPED / f"{stem}.json").exists() else TEST_CONFIGS / f"{stem}.json"




@pytest.mark.parametrize("stem", sorted(PUBLISHED))
def test_each_architecture_loads_to_its_published_size(stem):
    model = load_hf_config(config_file(stem))
    assert model.n_params == pytest.approx(PUBLISHED[stem], rel=0.01)
    if stem in ACTIVE:
        count, matrices = ACTIVE[stem]
        assert model.n_linear + matrices * model.vocab * model.hidden == pytest.approx(count, rel=0.02)


def test_every_shipped_config_is_a_preset_and_tested():
    shipped = {p.stem for p in SHIPPED.glob("*.json")}
    assert shipped == {hf_id.replace("/", "__") for hf_id in CONFIG_PRESETS}
    assert shipped | {p.stem for p in TEST_CONFIGS.glob("*.json")} == set(PUBLISHED)


def test_the_hand_presets_agree_with_their_configs():
    """The shapes of the hand-written Llama and Mistral presets are their configs'."""
    for stem, preset in (("meta-llama__Meta-Llama-3-8B", "Llama-3-8B"),
                         ("meta-llama__Llama-3.1-8B", "Llama-3.1-8B"),
                         ("meta-llama__Llama-2-7b-hf", "Llama-2-7B")):
        read, hand = load_hf_config(config_file(stem)), resolve_model(preset)
        for field in ("n_layers", "hidden", "n_heads", "n_kv_heads", "ffn", "vocab",
                      "max_context", "head_dim", "n_linear", "kv_bytes_per_token"):
            assert getattr(read, field) == getattr(hand, field), (stem, field)


def test_deepseek_v3_kv_bytes_per_token_is_its_latent():
    model = resolve_model("deepseek-ai/DeepSeek-V3")
    assert model.kv_bytes_per_token == (512 + 64) * 61 * 2 == 70_272
    assert model.is_mla and model.is_moe


def test_an_fp8_kv_cache_holds_twice_the_tokens():
    import dataclasses

    from batchlab.hardware import resolve_gpu
    from batchlab.hardware.parallel import kv_capacity_tokens

    gpu = resolve_gpu("H100")
    for name in ("Llama-3.1-8B", "deepseek-ai/DeepSeek-V2"):
        model = resolve_model(name)
        if model.weight_bytes > gpu.memory:
            continue
        fp8 = dataclasses.replace(model, kv_cache_dtype="fp8")
        assert fp8.kv_bytes_per_token * 2 == model.kv_bytes_per_token
        # twice the tokens, up to the one more block of 16 that the halved page leaves room for
        extra = kv_capacity_tokens(fp8, gpu) - 2 * kv_capacity_tokens(model, gpu)
        assert 0 <= extra <= 16


def test_moe_shapes_by_hand():
    """Qwen3-30B-A3B: 48 layers of 128 experts of 3 x 2048 x 768, top-8, and a router."""
    m = resolve_model("Qwen/Qwen3-30B-A3B")
    attention = 2048 * 32 * 128 + 2 * 2048 * 4 * 128 + 32 * 128 * 2048
    expert = 3 * 2048 * 768
    assert m.n_linear == 48 * (attention + 8 * expert + 2048 * 128)
    assert m.n_params == 48 * (attention + 128 * expert + 2048 * 128) + 2 * 151936 * 2048


def test_mla_and_dense_leading_layers_by_hand():
    """DeepSeek-V3: MLA projections (DeepSeek-V2 paper, eqs. 9-14) on 61 layers, 3 dense."""
    m = resolve_model("DeepSeek-V3")
    attention = (7168 * 1536 + 1536 * 128 * 192 + 7168 * (512 + 64) + 512 * 128 * (128 + 128)
                 + 128 * 128 * 7168)
    dense, expert = 3 * 7168 * 18432, 3 * 7168 * 2048
    moe = 256 * expert + expert + 7168 * 256   # routed, one shared, router
    assert m.n_params == 61 * attention + 3 * dense + 58 * moe + 2 * 129280 * 7168
    assert m.dense_layers == 3 and m.shared_expert_ffn == 2048


def test_precisions_from_the_quantization_config():
    oss = resolve_model("openai/gpt-oss-120b")
    assert oss.expert_dtype == "mxfp4" and oss.weight_dtype == ""
    # experts at 4.25 bits, everything else in bf16: about 65 GB, one 80 GB GPU holds it
    assert 60e9 < oss.weight_bytes < 70e9
    v3 = resolve_model("DeepSeek-V3")
    assert v3.weight_dtype == "fp8" and 670e9 < v3.weight_bytes < 680e9


def test_sliding_windows_from_each_convention():
    assert (resolve_model("gpt-oss-120b").sliding_window, resolve_model("gpt-oss-120b").sliding_layers) == (128, 18)
    assert resolve_model("gemma-2-9b").sliding_layers == 21          # even layers
    assert resolve_model("gemma-3-1b-it").sliding_layers == 26 - 26 // 6  # 5 local : 1 global
    assert load_hf_config(config_file("mistralai__Mistral-7B-v0.1")).sliding_layers == 32
    assert resolve_model("Qwen2.5-7B-Instruct").sliding_window == 0  # use_sliding_window false


def test_a_folder_holding_config_json_is_a_model(tmp_path):
    folder = tmp_path / "my-llama"
    folder.mkdir()
    (folder / "config.json").write_text(config_file("meta-llama__Llama-3.1-8B").read_text())
    model = resolve_model(str(folder))
    assert model.name == "my-llama" and model.n_layers == 32
    assert resolve_model(str(folder / "config.json")).name == "my-llama"


def _config(tmp_path, **changes) -> str:
    data = json.loads(config_file("Qwen__Qwen3-30B-A3B").read_text())
    data.update(changes)
    data = {k: v for k, v in data.items() if v != "__drop__"}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(data))
    return str(path)


@pytest.mark.parametrize("changes, named", [
    ({"architectures": ["MambaForCausalLM"]}, "architecture 'MambaForCausalLM'"),
    ({"architectures": "Qwen3MoeForCausalLM"}, "field 'architectures'"),
    ({"num_hidden_layers": "__drop__"}, "field 'num_hidden_layers' is missing"),
    ({"hidden_size": 0}, "field 'hidden_size'"),
    ({"num_experts_per_tok": 300}, "experts_per_token"),
    ({"decoder_sparse_step": 2}, "field 'decoder_sparse_step'"),
    ({"mlp_only_layers": [0, 1]}, "field 'mlp_only_layers'"),
    ({"quantization_config": {"quant_method": "bitsandbytes"}}, "quantization_config.quant_method"),
    ({"torch_dtype": "int8"}, "field 'torch_dtype'"),
    ({"tie_word_embeddings": "yes"}, "field 'tie_word_embeddings'"),
])
def test_what_cannot_be_modelled_is_refused_by_name(tmp_path, changes, named):
    with pytest.raises(InputError, match=named.replace("(", r"\(").replace(")", r"\)")):
        resolve_model(_config(tmp_path, **changes))


def test_the_cli_names_the_architecture_and_exits_2(tmp_path, capsys):
    path = _config(tmp_path, architectures=["MambaForCausalLM"])
    assert main(["cost", "--model", path, "--gpu", "H100", "--batch", "1", "--context", "10"]) == 2
    err = capsys.readouterr().err.strip()
    assert "MambaForCausalLM" in err and len(err.splitlines()) == 1
