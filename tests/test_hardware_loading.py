"""User specs from TOML and JSON files: tables, base presets, and errors naming file and field."""

import json

import pytest

from batchlab.errors import InputError
from batchlab.hardware import MODEL_PRESETS, resolve_gpu, resolve_model

FULL_MODEL = """
[model]
name = "toy"
n_layers = 4
hidden = 256
n_heads = 8
n_kv_heads = 2
ffn = 1024
vocab = 1000
max_context = 2048
"""


def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_toml_with_model_and_gpu_tables(tmp_path):
    path = write(tmp_path, "spec.toml", FULL_MODEL + """
[gpu]
name = "toy-gpu"
peak_flops = 1e14
mem_bandwidth = 1e12
memory = 16e9
mfu = 0.4
""")
    model, gpu = resolve_model(str(path)), resolve_gpu(path)
    assert (model.name, model.head_dim, model.n_kv_heads) == ("toy", 32, 2)
    assert model.n_params == model.derived_params
    assert (gpu.name, gpu.mfu, gpu.mbu) == ("toy-gpu", 0.4, 0.8)


def test_json_flat_spec_with_base(tmp_path):
    path = write(tmp_path, "h100-slow.json", json.dumps({"base": "h100-sxm", "mbu": 0.6,
                                                          "step_overhead_s": 0.002}))
    gpu = resolve_gpu(str(path))
    assert (gpu.name, gpu.peak_flops, gpu.mbu, gpu.step_overhead_s) == (
        "h100-slow", 989e12, 0.6, 0.002)


def test_base_keeps_published_total_unless_shapes_change(tmp_path):
    same = resolve_model(write(tmp_path, "a.toml", '[model]\nbase = "Llama-3-8B"\n'
                                                   'max_context = 4096\nn_params = 8.03e9\n'))
    assert same.n_params == MODEL_PRESETS["Llama-3-8B"].n_params and same.max_context == 4096
    longer = resolve_model(write(tmp_path, "b.toml", '[model]\nbase = "Llama-3-8B"\n'
                                                     'n_layers = 64\n'))
    assert longer.n_params == longer.derived_params
    assert longer.kv_bytes_per_token == 2 * MODEL_PRESETS["Llama-3-8B"].kv_bytes_per_token


@pytest.mark.parametrize("text,needle", [
    ('[model]\nbase = "Llama-3-8B"\nhiden = 1\n', "'hiden'"),
    ('[model]\nname = "x"\nn_layers = 2\n', "'hidden'"),
    ('[model]\nbase = "Llama-3-8B"\nn_layers = "many"\n', "'n_layers'"),
    ('[model]\nbase = "Llama-3-8B"\nn_layers = 2.5\n', "'n_layers'"),
    ('[model]\nbase = "Llama-3-8B"\nn_kv_heads = 3\n', "'n_kv_heads'"),
    ('[model]\nbase = "GPT-9"\n', "'base'"),
    ('[gpu]\nbase = "L4"\n', "no [model] table"),
    ("[model\n", "not valid TOML"),
])
def test_bad_model_files_name_file_and_field(tmp_path, text, needle):
    path = write(tmp_path, "bad.toml", text)
    with pytest.raises(InputError) as err:
        resolve_model(str(path))
    assert needle in str(err.value) and "bad.toml" in str(err.value)


def test_bad_gpu_json_and_missing_file(tmp_path):
    path = write(tmp_path, "g.json", json.dumps({"gpu": {"base": "L4", "mfu": 2}}))
    with pytest.raises(InputError, match="g.json.*'mfu'"):
        resolve_gpu(str(path))
    with pytest.raises(InputError, match="cannot read"):
        resolve_gpu(str(tmp_path / "absent.json"))
    with pytest.raises(InputError, match="must end in"):
        resolve_gpu(write(tmp_path, "g.yaml", "x: 1"))
