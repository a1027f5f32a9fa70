"""The model, precision and layout paths a vLLM user takes first: the checkpoint names they
type, the quantization_config blocks their checkpoints carry, flags vLLM refuses, and a twin
answering to the name it was started with."""

import json
import warnings
from pathlib import Path

import pytest

from batchlab.cli import main
from batchlab.errors import InputError
from batchlab.hardware import resolve_model
from batchlab.hardware.presets import model_preset

ROOT = Path(__file__).resolve().parents[1]
LLAMA_1B = ROOT / "src" / "batchlab" / "data" / "models" / "meta-llama__Llama-3.2-1B.json"
QWEN3_MOE = ROOT / "src" / "batchlab" / "data" / "models" / "Qwen__Qwen3-30B-A3B.json"


@pytest.mark.parametrize("typed, preset", [
    ("meta-llama/Llama-3.1-8B-Instruct", "Llama-3.1-8B"),
    ("meta-llama/Meta-Llama-3.1-8B-Instruct", "Llama-3.1-8B"),
    ("META-LLAMA/META-LLAMA-3-8B-INSTRUCT", "Llama-3-8B"),
    ("meta-llama/Llama-3.1-70B-Instruct", "Llama-3.1-70B"),
    ("meta-llama/Meta-Llama-3-70B-Instruct", "Llama-3-70B"),
    ("meta-llama/Llama-2-7b-chat-hf", "Llama-2-7B"),
    ("meta-llama/Llama-2-70b-chat-hf", "Llama-2-70B"),
    ("mistralai/Mistral-7B-Instruct-v0.1", "Mistral-7B"),
    ("meta-llama/Llama-3.2-1B-Instruct", "Llama-3.2-1B"),
    ("meta-llama/llama-3.2-3b-instruct", "Llama-3.2-3B"),
    ("deepseek-ai/DeepSeek-R1-0528", "DeepSeek-R1"),
])
def test_the_instruct_checkpoints_users_serve_resolve_to_their_base_shapes(typed, preset):
    assert model_preset(typed) is model_preset(preset)


def test_a_checkpoint_whose_shapes_differ_from_the_preset_is_not_guessed():
    # Qwen3-30B-A3B-Instruct-2507 has a 262,144-token context, Mistral-7B-Instruct-v0.2 no
    # sliding window: neither is the preset of its family.
    for typed in ("Qwen/Qwen3-30B-A3B-Instruct-2507", "mistralai/Mistral-7B-Instruct-v0.2"):
        with pytest.raises(InputError, match="unknown model"):
            model_preset(typed)


def _llama_with(tmp_path, quantization_config: dict, **changes) -> str:
    data = {**json.loads(LLAMA_1B.read_text()), **changes,
            "quantization_config": quantization_config}
    folder = tmp_path / "checkpoint"
    folder.mkdir(exist_ok=True)
    (folder / "config.json").write_text(json.dumps(data))
    return str(folder)


# llm-compressor's schemes, as RedHatAI's checkpoints write them.
def _compressed(weights: dict, activations: dict | None = None, **extra) -> dict:
    group = {"targets": ["Linear"], "weights": weights, "input_activations": activations}
    return {"quant_method": "compressed-tensors", "config_groups": {"group_0": group},
            "ignore": ["lm_head"], **extra}


FP8_DYNAMIC = _compressed({"num_bits": 8, "type": "float", "strategy": "channel"},
                          {"num_bits": 8, "type": "float", "dynamic": True},
                          format="float-quantized")
W4A16 = _compressed({"num_bits": 4, "type": "int", "strategy": "group", "group_size": 128},
                    format="pack-quantized")
W8A8 = _compressed({"num_bits": 8, "type": "int", "strategy": "channel"},
                   {"num_bits": 8, "type": "int", "dynamic": True}, format="int-quantized")


@pytest.mark.parametrize("quantization_config, width", [
    (FP8_DYNAMIC, "fp8"), (W4A16, "int4"), (W8A8, "int8"),
    ({"quant_method": "fbgemm_fp8", "activation_scale_ub": 1200.0}, "fp8"),
    ({"quant_method": "modelopt", "quant_algo": "FP8"}, "fp8"),
    ({"quant_method": "awq", "w_bit": 4, "q_group_size": 128}, "int4"),   # AutoAWQ's spelling
    ({"quant_method": "gptq", "bits": 8, "group_size": 128}, "int8"),
])
def test_each_quantization_config_users_ship_sets_the_weight_width(tmp_path, quantization_config, width):
    plain = resolve_model(str(LLAMA_1B))
    model = resolve_model(_llama_with(tmp_path, quantization_config))
    assert model.weight_dtype == width
    assert model.weight_bytes < plain.weight_bytes


def test_compressed_tensors_fp8_weighs_what_the_fp8_method_does(tmp_path):
    assert (resolve_model(_llama_with(tmp_path, FP8_DYNAMIC)).weight_bytes
            == resolve_model(_llama_with(tmp_path, {"quant_method": "fp8"})).weight_bytes)


def test_compressed_tensors_on_an_moe_quantizes_its_experts(tmp_path):
    data = {**json.loads(QWEN3_MOE.read_text()), "quantization_config": FP8_DYNAMIC}
    (tmp_path / "config.json").write_text(json.dumps(data))
    model = resolve_model(str(tmp_path))
    plain = resolve_model("Qwen/Qwen3-30B-A3B")
    assert model.weight_dtype == "fp8" and model.expert_dtype == ""
    assert 0.45 < model.weight_bytes / plain.weight_bytes < 0.55


@pytest.mark.parametrize("quantization_config, named", [
    (_compressed({"num_bits": 4, "type": "float", "group_size": 16}, format="nvfp4-pack-quantized"),
     "config_groups.group_0.weights"),
    ({**W4A16, "config_groups": {"a": W4A16["config_groups"]["group_0"],
                                 "b": FP8_DYNAMIC["config_groups"]["group_0"]}},
     "quantization_config.config_groups"),
    ({**W4A16, "sparsity_config": {"format": "sparse-24-bitmask"}}, "sparsity_config"),
    ({"quant_method": "compressed-tensors"}, "config_groups"),
    ({"quant_method": "modelopt", "quant_algo": "NVFP4"}, "quant_algo"),
    ({"quant_method": "gptq", "bits": 3}, "quantization_config.bits"),
    ({"quant_method": "bitsandbytes", "load_in_4bit": True}, "quantization_config.quant_method"),
])
def test_a_quantization_batchlab_has_no_width_for_exits_2_naming_the_field(tmp_path, capsys,
                                                                             quantization_config, named):
    path = _llama_with(tmp_path, quantization_config)
    with pytest.raises(InputError, match=named):
        resolve_model(path)
    assert main(["cost", "--model", path]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and named in err


@pytest.mark.parametrize("model, flag, held", [
    ("openai/gpt-oss-120b", "fp8", "experts mxfp4"),
    ("openai/gpt-oss-20b", "awq", "experts mxfp4"),
    ("deepseek-ai/DeepSeek-V3", "mxfp4", "weights fp8"),
    ("deepseek-ai/DeepSeek-V3", "gptq", "weights fp8"),
])
def test_vllm_refuses_a_quantization_other_than_the_checkpoints(capsys, model, flag, held):
    assert main(["cost", "--model", model, "--gpu", "H200", "--tp", "8", "--quantization", flag]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"--quantization {flag}" in err and held in err


def _weights(capsys, *flags) -> int:
    assert main(["cost", "--gpu", "H200", "--tp", "8", "--json", *flags]) == 0
    return json.loads(capsys.readouterr().out)["weight_bytes"]


def test_the_checkpoints_own_method_and_none_are_taken(capsys):
    oss = _weights(capsys, "--model", "openai/gpt-oss-120b")
    assert _weights(capsys, "--model", "openai/gpt-oss-120b", "--quantization", "mxfp4") == oss
    assert _weights(capsys, "--model", "openai/gpt-oss-120b", "--quantization", "none") > 3 * oss
    v3 = _weights(capsys, "--model", "deepseek-ai/DeepSeek-V3")
    assert _weights(capsys, "--model", "deepseek-ai/DeepSeek-V3", "--quantization", "fp8") == v3
    # an unquantized model takes any method: a what-if of its quantized checkpoint
    llama = _weights(capsys, "--model", "Llama-3.1-70B")
    assert _weights(capsys, "--model", "Llama-3.1-70B", "--quantization", "awq") < llama / 3


def test_a_twin_answers_to_the_model_name_it_was_started_with():
    # vLLM's --served-model-name defaults to --model as given: clients send the Hugging Face id
    from batchlab.serve.twin_server import TwinConfig, build_twin, twin_app

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from starlette.testclient import TestClient

    state, _ = build_twin(TwinConfig(model="Qwen/Qwen3-30B-A3B", tp=2, expert_parallel=True,
                                     system="paged:max_bs=8", max_model_len=4096, kv_cache_tokens=4096))
    with TestClient(twin_app(state, None)) as client:
        assert [m["id"] for m in client.get("/v1/models").json()["data"]] == ["Qwen/Qwen3-30B-A3B"]
        r = client.post("/v1/completions", json={"model": "Qwen/Qwen3-30B-A3B", "prompt": [1, 2, 3],
                                                 "max_tokens": 4, "ignore_eos": True})
        assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 4
        assert client.post("/v1/completions", json={"model": "Qwen3-30B-A3B", "prompt": [1],
                                                    "max_tokens": 1}).status_code == 404


QWEN3_8B = ROOT / "src" / "batchlab" / "data" / "models" / "Qwen__Qwen3-8B.json"


def _qwen3_8b_with(tmp_path, **changes) -> str:
    (tmp_path / "config.json").write_text(json.dumps({**json.loads(QWEN3_8B.read_text()), **changes}))
    return str(tmp_path)


@pytest.mark.parametrize("rope_scaling, context", [
    # Qwen3's model card: add YaRN with factor 4 over 32,768 tokens to serve 131,072
    ({"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}, 131072),
    ({"type": "yarn", "factor": 2, "original_max_position_embeddings": 32768}, 65536),
    ({"rope_type": "linear", "factor": 2.0}, 2 * 40960),
    ({"rope_type": "dynamic", "factor": 2.0}, 2 * 40960),
    ({"rope_type": "llama3", "factor": 8.0, "original_max_position_embeddings": 8192}, 40960),
    ({"rope_type": "longrope", "factor": 4.0}, 40960),
    ({"rope_type": "default"}, 40960),
    (None, 40960),
])
def test_rope_scaling_sets_the_context_as_vllm_derives_it(tmp_path, rope_scaling, context):
    model = resolve_model(_qwen3_8b_with(tmp_path, rope_scaling=rope_scaling))
    assert model.max_context == context


def test_every_shipped_config_keeps_its_context_under_the_rope_rule():
    # DeepSeek (yarn 40 x 4,096) and gpt-oss (yarn 32 x 4,096) give max_position_embeddings
    # itself; Gemma 3's linear factor 8 is already in its 131,072; Llama 3's is too.
    expected = {"DeepSeek-V3": 163840, "gpt-oss-120b": 131072, "gemma-3-27b-it": 131072,
                "Llama-3.3-70B-Instruct": 131072, "Qwen3-30B-A3B": 40960}
    assert {name: resolve_model(name).max_context for name in expected} == expected


def test_a_yarn_context_lets_long_prompts_through(tmp_path, capsys):
    path = _qwen3_8b_with(tmp_path, rope_scaling={"rope_type": "yarn", "factor": 4.0,
                                                   "original_max_position_embeddings": 32768})
    assert main(["cost", "--model", path, "--context", "100000", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["exceeds_max_context"] is False


@pytest.mark.parametrize("rope_scaling, named", [
    ({"rope_type": "yarn", "factor": 4.0}, "original_max_position_embeddings"),
    ({"rope_type": "linear", "factor": "4"}, "rope_scaling.factor"),
    ({"rope_type": "linear", "factor": 0.5}, "rope_scaling.factor"),
    ([4.0], "rope_scaling"),
])
def test_a_rope_scaling_that_cannot_be_read_is_refused_by_name(tmp_path, rope_scaling, named):
    with pytest.raises(InputError, match=named):
        resolve_model(_qwen3_8b_with(tmp_path, rope_scaling=rope_scaling))


def _fleet(capsys, *flags) -> list[dict]:
    assert main(["fleet", "--num-prompts", "6", "--request-rate", "4", "--gpu", "H100", "--json",
                 *flags]) == 0
    return json.loads(capsys.readouterr().out)["replicas"]


def test_a_fleet_of_a_config_json_model_runs_it(tmp_path, capsys):
    path = _llama_with(tmp_path, W4A16)
    (replica,) = _fleet(capsys, "--model", path)
    assert replica["model"] == "checkpoint" and replica["completed"] == 6
    (tp2,) = _fleet(capsys, "--model", path, "--replica", f"count=1,tp=2,model={path}")
    assert tp2["model"] == "checkpoint" and tp2["tp"] == 2


def test_a_fleets_precision_flags_reach_every_replica_group(capsys):
    groups = ("--replica", "count=1,tp=2", "--replica", "count=1,tp=2,model=Llama-3.3-70B")
    plain = _fleet(capsys, "--model", "Llama-3.1-70B", *groups)
    fp8 = _fleet(capsys, "--model", "Llama-3.1-70B", *groups, "--quantization", "fp8")
    assert [r["model"] for r in fp8] == ["Llama-3.1-70B", "Llama-3.3-70B-Instruct"]
    for quantized, full in zip(fp8, plain):
        assert quantized["mean_tpot_ms"] < 0.8 * full["mean_tpot_ms"]


def test_a_twin_takes_vllms_precision_flags():
    from batchlab.serve.twin_server import TwinConfig, build_twin

    def capacity(**flags) -> int:
        state, _ = build_twin(TwinConfig(system="paged:max_bs=8", **flags))
        return state.loop.engine.memory.capacity_tokens

    plain = capacity()
    # twice the tokens in whole 16-token blocks: the halved page may leave room for one more
    assert 0 <= capacity(kv_cache_dtype="fp8") - 2 * plain <= 16
    assert capacity(quantization="fp8") > plain     # half the weights: more room for KV
    with pytest.raises(InputError, match="--quantization fp8"):
        build_twin(TwinConfig(model="openai/gpt-oss-20b", quantization="fp8"))


@pytest.mark.parametrize("flag, value", [("--quantization", "fp8"), ("--kv-cache-dtype", "fp8"),
                                         ("--dtype", "float16")])
def test_the_mini_server_refuses_the_twins_precision_flags(capsys, flag, value):
    assert main(["serve", flag, value]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and flag in err and "--simulate" in err


def test_vllms_gpu_memory_utilization_spelling_is_taken(capsys):
    def capacity(*flags) -> int:
        assert main(["cost", "--json", *flags]) == 0
        return json.loads(capsys.readouterr().out)["kv_capacity_tokens"]

    assert capacity("--gpu-memory-utilization", "0.5") == capacity("--memory-utilization", "0.5")
    assert capacity("--gpu-memory-utilization", "0.5") < capacity()


@pytest.mark.parametrize("model, tp", [("meta-llama/Llama-3.2-3B", "3"),     # 24 heads, 8 KV heads
                                       ("meta-llama/Llama-3.2-3B", "12"),
                                       ("Qwen/Qwen2.5-7B-Instruct", "7")])   # 28 heads, 4 KV heads
def test_vllm_refuses_a_tp_that_neither_splits_nor_replicates_the_kv_heads(capsys, model, tp):
    assert main(["cost", "--model", model, "--tp", tp]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--tp" in err and "KV heads" in err


def test_a_tp_above_the_kv_heads_replicates_them_as_vllm_does(capsys):
    # Qwen3-30B-A3B: 4 KV heads on 8 GPUs, each held by two
    assert main(["cost", "--model", "Qwen/Qwen3-30B-A3B", "--tp", "8", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    model = resolve_model("Qwen/Qwen3-30B-A3B")
    assert out["kv_bytes_per_token_per_gpu"] == 2 * 2 * model.n_layers * 1 * model.head_dim


def test_a_folder_without_config_json_is_named(tmp_path, capsys):
    (tmp_path / "model.safetensors").write_bytes(b"")
    assert main(["cost", "--model", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and str(tmp_path) in err and "holds no config.json" in err


def _llama_config(tmp_path, **changes) -> str:
    data = {**json.loads(LLAMA_1B.read_text()), **changes}
    data = {k: v for k, v in data.items() if v != "__drop__"}
    (tmp_path / "config.json").write_text(json.dumps(data))
    return str(tmp_path)


def test_the_config_variants_users_have_load_as_vllm_serves_them(tmp_path):
    plain = resolve_model(str(LLAMA_1B))
    # an fp32 checkpoint is served in 16 bits by vLLM's --dtype auto
    assert resolve_model(_llama_config(tmp_path, torch_dtype="float32")).weight_bytes == plain.weight_bytes
    # newer transformers write `dtype`; older ones none at all
    assert resolve_model(_llama_config(tmp_path, torch_dtype="__drop__", dtype="bfloat16")).weight_bytes \
        == plain.weight_bytes
    # head_dim null or absent: hidden / heads (2048 / 32 = 64, the config's own)
    assert resolve_model(_llama_config(tmp_path, head_dim=None)).head_dim == 64
    assert resolve_model(_llama_config(tmp_path, head_dim="__drop__")).head_dim == 64
    # num_key_value_heads null: multi-head attention, as transformers defaults it
    assert resolve_model(_llama_config(tmp_path, num_key_value_heads=None)).n_kv_heads == 32
    # an untied LM head is a second vocabulary matrix
    untied = resolve_model(_llama_config(tmp_path, tie_word_embeddings=False))
    assert untied.n_params - plain.n_params == 128256 * 2048


def test_dtype_float32_holds_the_weights_and_kv_in_32_bits(capsys):
    def fields(*flags) -> dict:
        assert main(["cost", "--model", "Llama-3.1-8B", "--json", *flags]) == 0
        return json.loads(capsys.readouterr().out)

    plain, fp32 = fields(), fields("--dtype", "float32")
    assert fp32["weight_bytes"] == 2 * plain["weight_bytes"]
    assert fp32["kv_bytes_per_token"] == 2 * plain["kv_bytes_per_token"]


@pytest.mark.parametrize("architecture", ["Llama4ForConditionalGeneration", "MiniMaxM1ForCausalLM",
                                          "Glm4MoeForCausalLM"])
def test_an_architecture_not_modelled_exits_2_naming_it(tmp_path, capsys, architecture):
    path = _llama_config(tmp_path, architectures=[architecture])
    assert main(["simulate", "--model", path, "--num-prompts", "2"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"architecture '{architecture}'" in err


def test_a_malformed_config_exits_2_naming_the_file(tmp_path, capsys):
    (tmp_path / "config.json").write_text('{"architectures": ["LlamaForCausalLM"], ')
    assert main(["cost", "--model", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "config.json: not valid JSON" in err


def test_vllms_long_parallelism_flags_are_taken_where_the_short_ones_are(capsys):
    def cost(*flags) -> dict:
        assert main(["cost", "--model", "Qwen/Qwen3-30B-A3B", "--json", *flags]) == 0
        return json.loads(capsys.readouterr().out)

    assert cost("--tensor-parallel-size", "2", "--pipeline-parallel-size", "2") == cost("--tp", "2", "--pp", "2")
    fleet = _fleet(capsys, "--model", "Qwen/Qwen3-30B-A3B", "--tensor-parallel-size", "2",
                   "--pipeline-parallel-size", "2", "--enable-expert-parallel")
    assert (fleet[0]["tp"], fleet[0]["pp"]) == (2, 2)
    # the mini server has no GPUs: the flag is taken, and refused without --simulate
    assert main(["serve", "--tensor-parallel-size", "2"]) == 2
    assert "--simulate" in capsys.readouterr().err
    from batchlab.cli import build_parser
    args = build_parser(("serve",)).parse_args(["serve", "--simulate", "--tensor-parallel-size", "4"])
    assert args.tp == 4


@pytest.mark.parametrize("printed, preset", [
    ("NVIDIA H100 80GB HBM3", "H100-SXM"), ("NVIDIA A100-SXM4-80GB", "A100-80GB"),
    ("NVIDIA A100-SXM4-40GB", "A100-40GB"), ("NVIDIA H200", "H200"), ("NVIDIA B200", "B200"),
    ("NVIDIA L4", "L4"), ("NVIDIA L40S", "L40S"), ("NVIDIA A10G", "A10G"), ("NVIDIA A40", "A40"),
    ("AMD Instinct MI300X", "MI300X"),
])
def test_the_gpu_names_nvidia_smi_prints_resolve(printed, preset):
    from batchlab.hardware.presets import gpu_preset
    assert gpu_preset(printed).name == preset


@pytest.mark.parametrize("card", ["NVIDIA H100 PCIe", "A100 80GB PCIe", "NVIDIA H200 NVL", "NVIDIA"])
def test_a_pcie_card_is_not_taken_for_the_sxm_part(card):
    from batchlab.hardware.presets import gpu_preset
    with pytest.raises(InputError, match="unknown gpu"):
        gpu_preset(card)


def test_cost_says_when_the_batch_does_not_fit_in_the_kv_cache(capsys):
    def cost(*flags) -> dict:
        assert main(["cost", "--model", "Llama-3.1-70B", "--gpu", "H100", "--tp", "4", "--json", *flags]) == 0
        return json.loads(capsys.readouterr().out)

    fits = cost("--batch", "4", "--context", "2000")
    assert fits["sequences_in_kv"] == fits["kv_capacity_tokens"] // 2001 and not fits["exceeds_kv_capacity"]
    over = cost("--batch", str(fits["sequences_in_kv"] + 1), "--context", "2000")
    assert over["exceeds_kv_capacity"] and over["time_s"] > fits["time_s"]
    long = cost("--batch", "1000", "--context", "100000")["sequences_in_kv"]
    assert 0 < long < 1000
    assert main(["cost", "--model", "Llama-3.1-70B", "--gpu", "H100", "--tp", "4", "--batch", "1000",
                 "--context", "100000"]) == 0
    caption = " ".join(capsys.readouterr().out.split())   # the table wraps its caption
    assert f"the KV cache holds {long} sequences of 100,001 tokens, not 1,000" in caption


def test_a_windowed_model_holds_its_window_per_sequence(capsys):
    # gpt-oss-120b: 18 full and 18 windowed (128-token) layers, so a 60,001-token sequence
    # takes (18 x 60,001 + 18 x 128) / 36 tokens on every layer
    assert main(["cost", "--model", "openai/gpt-oss-120b", "--gpu", "H100", "--batch", "2",
                 "--context", "60000", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    per_sequence = -(-(18 * 60001 + 18 * 128) // 36)
    assert out["sequences_in_kv"] == out["kv_tokens_every_layer"] // per_sequence == 1
    assert out["exceeds_kv_capacity"]


@pytest.mark.parametrize("flags, hint", [
    (["--model", "deepseek-ai/DeepSeek-V3", "--gpu", "H200"], "; tp 8 holds them"),
    (["--model", "mistralai/Mixtral-8x7B-v0.1", "--gpu", "H100"], "; tp 2 holds them"),
    (["--model", "Llama-3.1-70B", "--gpu", "L4", "--tp", "2"], "; tp 8 holds them"),
    # 672.88 GB over 8 H100s is 84 GB each: no tp of one node holds it, and no hint is made up
    (["--model", "deepseek-ai/DeepSeek-V3", "--gpu", "H100", "--tp", "2"], "no room for KV"),
])
def test_weights_that_do_not_fit_name_the_tp_that_holds_them(capsys, flags, hint):
    assert main(["cost", *flags]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.endswith(hint)
