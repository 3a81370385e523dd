"""Real models export: each class of failure that stopped them, at a small configuration,
and the one clear error that remains when a model cannot be traced."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from sgc_trace import ExportError, InputSpec, export
from sgc_trace.tools.cli import lm_cross_entropy

PYTHON_DIR = Path(__file__).resolve().parents[1]
torchvision = pytest.importorskip("torchvision")
transformers = pytest.importorskip("transformers")


def _tokens(batch=2, seq=16, vocab=100):
    return [InputSpec("tokens", (batch, seq), torch.int64, high=vocab),
            InputSpec("target", (batch, seq), torch.int64, high=vocab)]


def _param_count(graph):
    return graph["meta"]["param_count"]


def _real_param_count(factory):
    return sum(p.numel() for p in factory().parameters())


def _grads(graph):
    return {o[: -len(".grad")] for o in graph["outputs"] if o.endswith(".grad")}


# -- constructors that fail under FakeTensorMode ---------------------------------------


class TransformerLM(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(100, 32)
        # nn.TransformerEncoder deep-copies the layer: under FakeTensorMode the copies'
        # fake tensors belong to a copy of the mode.
        self.encoder = nn.TransformerEncoder(nn.TransformerEncoderLayer(32, 4, 64, batch_first=True), 2,
                                             enable_nested_tensor=False)
        self.head = nn.Linear(32, 100)

    def forward(self, tokens):
        return self.head(self.encoder(self.embed(tokens)))


def test_transformer_encoder_deep_copies_are_adopted():
    graph = export(TransformerLM, lm_cross_entropy, _tokens())
    assert graph["meta"]["built"] == "fake"
    assert _param_count(graph) == _real_param_count(TransformerLM)
    names = {t["name"] for t in graph["tensors"] if t.get("kind") == "param"}
    assert {"encoder.layers.0.linear1.weight", "encoder.layers.1.linear1.weight"} <= names
    assert _grads(graph) == names


def _tiny_vit():
    return torchvision.models.VisionTransformer(image_size=32, patch_size=16, num_layers=1, num_heads=2,
                                                hidden_dim=32, mlp_dim=64, num_classes=10)


def test_vit_trunc_normal_init_falls_back_to_a_real_build():
    graph = export(_tiny_vit, F.cross_entropy, [InputSpec("x", (2, 3, 32, 32)), InputSpec("y", (2,), torch.int64)])
    built = graph["meta"]["built"]
    # torch 2.15's trunc_normal_ reads data (no fake build: the real fallback); 2.11's does not.
    if torch.__version__ >= "2.12":
        assert built.startswith("real: DataDependentOutputException") and "vision_transformer.py" in built
    else:
        assert built == "fake"
    assert _param_count(graph) == _real_param_count(_tiny_vit)


class ReadsData(nn.Module):
    def __init__(self):
        super().__init__()
        widths = torch.tensor([3, 5]).tolist()  # data read in the constructor
        self.a = nn.Linear(4, widths[0])
        self.b = nn.Linear(widths[0], widths[1])

    def forward(self, x):
        return self.b(torch.relu(self.a(x)))


def test_constructor_reading_tensor_data():
    graph = export(ReadsData, F.mse_loss, [InputSpec("x", (2, 4)), InputSpec("y", (2, 5))])
    assert graph["meta"]["built"].startswith("real: ")
    assert _param_count(graph) == 4 * 3 + 3 + 3 * 5 + 5


def test_a_given_real_module_is_left_untouched():
    model = ReadsData()
    before = {n: p for n, p in model.named_parameters()}
    graph = export(model, F.mse_loss, [InputSpec("x", (2, 4)), InputSpec("y", (2, 5))])
    assert graph["meta"]["built"] == "given"
    after = dict(model.named_parameters())
    assert after.keys() == before.keys() and all(after[n] is before[n] for n in before)
    assert not any(type(p).__name__ == "FakeTensor" for p in model.parameters())


# -- parameters without gradient -------------------------------------------------------


class Unused(nn.Module):
    def __init__(self):
        super().__init__()
        self.used = nn.Linear(3, 4)
        self.unused = nn.Linear(3, 4)
        self.extra = nn.Parameter(torch.zeros(5))

    def forward(self, x):
        return self.used(x)


def test_parameters_the_forward_never_uses_get_no_gradient():
    model = Unused()
    graph = export(model, F.mse_loss, [InputSpec("x", (2, 3)), InputSpec("y", (2, 4))])
    assert graph["meta"]["params_without_grad"] == ["extra", "unused.weight", "unused.bias"]
    assert _grads(graph) == {"used.weight", "used.bias"}
    assert _param_count(graph) == sum(p.numel() for p in model.parameters())
    assert all(p.requires_grad for p in model.parameters())  # the caller's module is unchanged


def _tiny_bert():
    config = transformers.BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                                     intermediate_size=64, max_position_embeddings=64, pad_token_id=0)
    return transformers.BertForMaskedLM(config)


def test_bert_tied_bias_registered_twice():
    graph = export(_tiny_bert, lm_cross_entropy, _tokens())
    # cls.predictions.bias is cls.predictions.decoder.bias; the forward uses the second name.
    assert graph["meta"]["params_without_grad"] == ["cls.predictions.bias"]
    params = {t["name"] for t in graph["tensors"] if t.get("kind") == "param"}
    assert "cls.predictions.decoder.bias" not in params  # one tensor for the tied pair
    assert "cls.predictions.bias" in params and "cls.predictions.decoder.bias" in _grads(graph)
    unique = {id(p) for p in _tiny_bert().parameters()}
    assert len(params) == len(unique)
    assert _param_count(graph) == _real_param_count(_tiny_bert)


# -- model outputs ---------------------------------------------------------------------


def _tiny_gpt2():
    config = transformers.GPT2Config(vocab_size=100, n_positions=64, n_embd=32, n_layer=2, n_head=2,
                                     bos_token_id=0, eos_token_id=0)
    return transformers.GPT2LMHeadModel(config)


def test_gpt2_model_output_gives_its_logits_to_the_loss():
    graph = export(_tiny_gpt2, lm_cross_entropy, _tokens())
    assert graph["meta"]["model"] == "GPT2LMHeadModel"
    assert _param_count(graph) == _real_param_count(_tiny_gpt2)  # wte is tied to lm_head
    logits = [t for t in graph["tensors"] if t["shape"] == [2, 16, 100]]
    assert logits, "the [B, T, V] logits are in the graph"


class WithMask(nn.Module):
    def __init__(self):
        super().__init__()
        self.lm = _tiny_gpt2()

    def forward(self, tokens, mask):
        return self.lm(input_ids=tokens, attention_mask=mask)


def test_transformers_attention_mask_helpers_are_traced_past():
    inputs = [InputSpec("tokens", (2, 16), torch.int64, high=100), InputSpec("mask", (2, 16), torch.int64),
              InputSpec("target", (2, 16), torch.int64, high=100)]
    graph = export(WithMask, lm_cross_entropy, inputs, num_model_inputs=2)
    tensors = {t["name"]: t for t in graph["tensors"]}
    assert tensors["mask"]["kind"] == "input"
    assert any("mask" in op["inputs"] for op in graph["ops"])  # the mask is used, not ignored


class DictOut(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3, 4)

    def forward(self, x):
        h = self.fc(x)
        return {"hidden": h.detach(), "logits": h * 2}


class TupleOut(DictOut):
    def forward(self, x):
        h = self.fc(x)
        return h, h.detach().sum()


@pytest.mark.parametrize("model", [DictOut, TupleOut])
def test_dict_and_tuple_outputs(model):
    graph = export(model, F.cross_entropy, [InputSpec("x", (2, 3)), InputSpec("y", (2,), torch.int64)])
    assert _grads(graph) == {"fc.weight", "fc.bias"}


def test_raw_output_goes_to_the_loss_as_is():
    def loss(out, y):
        return F.mse_loss(out[0], y) + out[1]

    graph = export(TupleOut, loss, [InputSpec("x", (2, 3)), InputSpec("y", (2, 4))], raw_output=True)
    assert graph["loss"] == "loss"
    # Without raw_output the loss gets the first tensor: out[1] is then a row, not the scalar.
    with pytest.raises(ExportError, match=r"loss function returned a tensor of shape \[4\], not a scalar"):
        export(TupleOut, loss, [InputSpec("x", (2, 3)), InputSpec("y", (2, 4))])


# -- what still fails fails clearly ----------------------------------------------------


class Branchy(nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = nn.Sequential(nn.Linear(3, 3), Gate())

    def forward(self, x):
        return self.inner(x)


class Gate(nn.Module):
    def forward(self, x):
        return x if x.sum() > 0 else -x  # data-dependent control flow


def test_data_dependent_control_flow_names_the_op_and_the_module():
    with pytest.raises(ExportError) as e:
        export(Branchy, F.mse_loss, [InputSpec("x", (2, 3)), InputSpec("y", (2, 3))])
    msg = str(e.value)
    assert "aten._local_scalar_dense" in msg and "module `inner.1`" in msg
    assert "test_real_models.py" in msg and "Try:" in msg
    assert "\n" not in msg


def test_non_scalar_loss():
    with pytest.raises(ExportError, match=r"not a scalar tensor \(reduce it"):
        export(DictOut, lambda out, y: (out - y) ** 2, [InputSpec("x", (2, 3)), InputSpec("y", (2, 4))])


def test_factory_that_fails_either_way():
    def broken():
        raise ValueError("no such layer size")

    with pytest.raises(ExportError, match="building the model failed: ValueError: no such layer size"):
        export(broken, F.mse_loss, [InputSpec("x", (2, 3))])


def test_bad_device_profile():
    with pytest.raises(ExportError, match="unknown device profile \"b200\""):
        export(DictOut, F.cross_entropy, [InputSpec("x", (2, 3)), InputSpec("y", (2,), torch.int64)],
               device_profile="b200")


def _cli(tmp_path, *args):
    return subprocess.run([sys.executable, "-m", "sgc_trace.tools.cli", *args], capture_output=True, text=True,
                          cwd=tmp_path, env={"PYTHONPATH": str(PYTHON_DIR), "PATH": "/usr/bin:/bin"})


def test_cli_failure_is_one_line_and_non_zero(tmp_path):
    model = tmp_path / "model.py"
    model.write_text(textwrap.dedent("""
        import torch
        from torch import nn

        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.fc = nn.Linear(3, 3)

            def forward(self, x):
                return self.fc(x)[torch.nonzero(x[:, 0] > 0).flatten()]

        def build():
            return Net()
    """))
    r = _cli(tmp_path, f"{model}:build", "--input", "x:2,3", "--target", "y:2:i64:3", "-o", "out.json")
    assert r.returncode == 1, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: tracing the training step failed")
    assert "aten.nonzero" in lines[0] and "Traceback" not in r.stderr
    assert not (tmp_path / "out.json").exists()

    r = _cli(tmp_path, f"{model}:nothing", "--input", "x:2,3", "-o", "out.json")
    assert r.returncode == 1 and r.stderr.strip() == f"error: `{model}` has no `nothing`"

    r = _cli(tmp_path, f"{model}:build", "--input", "x:2,3", "--device-profile", "9/x/1", "-o", "out.json")
    assert r.returncode == 2 and '"x" is not a number' in r.stderr and "Traceback" not in r.stderr


def test_cli_device_profile(tmp_path):
    model = tmp_path / "model.py"
    model.write_text("from torch import nn\n\ndef build():\n    return nn.Linear(3, 3)\n")
    r = _cli(tmp_path, f"{model}:build", "--input", "x:2,3", "--target", "y:2:i64:3",
             "--device-profile", "10/20/1000", "-o", "out.json.gz")
    assert r.returncode == 0, r.stderr
    from sgc_trace.exporter.api import load

    graph = load(tmp_path / "out.json.gz")
    assert graph["meta"]["time_us_source"] == {"method": "roofline", "device_profile": "10/20/1000",
                                               "f32_tflops": 10.0, "half_tflops": 20.0, "bandwidth_gbps": 1000.0}
