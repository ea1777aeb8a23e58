"""The image-classification page with the user's own ONNX classifier (#onnx-input): a small
colour ConvNet exported here by ember.onnx.save, uploaded with a labels file, classifies PNG
images exactly as ember.onnx.load does in CPython on the same pixels (cpu, ImageNet
normalisation too, and webgpu within 1e-3); the shipped Fashion-MNIST model, exported and
uploaded, gives the shipped model's probabilities; malformed, truncated and unsupported files
show `error: ...` while the page keeps classifying with the model it had."""

import numpy as np
import pytest
from conftest import wait_ready

import ember
from ember import Tensor, models
from ember import onnx as eonnx
from ember.train.plot import write_png

LABELS = ["cat", "dog", "fox", "owl", "emu"]
MEAN, STD = np.array([0.485, 0.456, 0.406]), np.array([0.229, 0.224, 0.225])
PAGE = "demos/image-classification/"
UP_TO_DATE = ("b => { const p = document.querySelector('#prediction');"
              " return p.dataset.version === document.querySelector('#preview').dataset.version"
              " && p.dataset.model === document.querySelector('#model-name').dataset.model"
              " && p.dataset.backend === b; }")


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """A colour classifier ([1,3,32,32] -> 5 classes) as .onnx, its labels, and PNG images."""
    folder = tmp_path_factory.mktemp("onnx")
    ember.seed(3)
    net = models.ConvNet(num_classes=5, in_channels=3, channels=(4, 8), hidden=16,
                         image_size=32).eval()
    for m in (net.conv1, net.conv2, net.fc1, net.fc2):  # larger weights: classes further apart
        m.weight = m.weight.with_value(m.weight * 4)
    path = eonnx.save(net, folder / "colour.onnx", Tensor.from_data(np.zeros((1, 3, 32, 32),
                                                                              np.float32)))
    (folder / "labels.txt").write_text("\n".join(LABELS) + "\n")
    rng = np.random.default_rng(0)
    yy, xx = np.mgrid[0:32, 0:32] / 31
    images = []
    for i in range(4):  # colour waves and noise
        wave = np.stack([np.cos(3 * i * xx + c) * np.sin(2 * (i + 1) * yy - c) for c in range(3)],
                        axis=-1)
        rgb = ((wave * 0.5 + 0.5) * 200 + rng.integers(0, 56, (32, 32, 3))).astype(np.uint8)
        write_png(folder / f"image-{i}.png", rgb)
        images.append((folder / f"image-{i}.png", rgb))
    fashion = eonnx.save(models.load("fashion-mnist").eval(), folder / "fashion.onnx",
                         Tensor.from_data(np.zeros((1, 1, 28, 28), np.float32)))
    return {"onnx": path, "labels": folder / "labels.txt", "images": images,
            "fashion": fashion, "folder": folder}


def native(path, rgb, normalize=False):
    """The probabilities ember.onnx gives in CPython for the page's input of `rgb`."""
    x = rgb.astype(np.float32) / 255
    if normalize:
        x = ((x - MEAN) / STD).astype(np.float32)
    logits = eonnx.load(path)(x.transpose(2, 0, 1)[None]).to_numpy()[0].astype(np.float64)
    p = np.exp(logits - logits.max())
    return p / p.sum()


def predicted(pg, backend="cpu"):
    pg.wait_for_function(UP_TO_DATE, arg=backend)
    probs = pg.eval_on_selector_all(
        "#probabilities [data-label]", "els => els.map(e => [e.dataset.label, +e.dataset.prob])")
    return pg.text_content("#prediction"), dict(probs)


def open_model(pg, path, before):
    pg.set_input_files("#onnx-input", str(path))
    pg.wait_for_function("n => document.querySelector('#model-name').dataset.model !== n"
                         " || document.querySelector('#onnx-status').textContent"
                         ".startsWith('error')", arg=before)


def test_an_uploaded_onnx_classifier_gives_cpythons_predictions(page, files):
    assert wait_ready(page, PAGE) == "ready"
    page.set_input_files("#labels-input", str(files["labels"]))
    open_model(page, files["onnx"], page.get_attribute("#model-name", "data-model"))
    status = page.text_content("#onnx-status")
    assert status.startswith("colour.onnx") and "[1,3,32,32]" in status and "5 classes" in status
    assert page.text_content("#model-name") == "colour.onnx"
    results = []
    for k, (path, rgb) in enumerate(files["images"]):
        normalize = k % 2 == 0
        page.select_option("#onnx-normalize", "imagenet" if normalize else "unit")
        page.set_input_files("#image-input", str(path))
        got, probs = predicted(page)
        want = native(files["onnx"], rgb, normalize)
        assert sorted(probs) == sorted(LABELS)
        np.testing.assert_allclose([probs[label] for label in LABELS], want, atol=1e-5)
        top = np.sort(want)[-2:]
        assert top[1] - top[0] > 1e-3, "the test's images must have a clear top class"
        assert got == LABELS[int(want.argmax())]
        assert float(page.text_content("#inference-ms")) > 0
        page.select_option("#backend", "webgpu")
        got_gpu, probs_gpu = predicted(page, "webgpu")
        page.select_option("#backend", "cpu")
        predicted(page)
        results.append((got, got_gpu, max(abs(probs[c] - probs_gpu[c]) for c in LABELS)))
    print("cpu, webgpu, max |p_cpu - p_webgpu|:", results)
    assert all(a == b and diff < 1e-3 for a, b, diff in results), results
    assert len({got for got, *_ in results}) > 1, results  # not one answer for every image


def test_the_shipped_model_as_onnx_predicts_as_the_shipped_model(page, files):
    assert wait_ready(page, PAGE) == "ready"
    samples = page.locator(".sample")
    shipped = []
    for k in (0, 3, 7):
        samples.nth(k).click()
        shipped.append(predicted(page))
    open_model(page, files["fashion"], page.get_attribute("#model-name", "data-model"))
    assert "[1,1,28,28]" in page.text_content("#onnx-status")
    for k, (_, probs) in zip((0, 3, 7), shipped):
        samples.nth(k).click()
        _, got = predicted(page)
        assert list(got) == [f"class {i}" for i in range(10)]  # no labels file given
        np.testing.assert_allclose(list(got.values()), list(probs.values()), atol=1e-5)
    page.click("#model-builtin")
    assert predicted(page)[0] == shipped[-1][0]


@pytest.mark.parametrize("what", ["garbage", "truncated", "unsupported"])
def test_a_bad_onnx_file_shows_an_error_and_the_page_keeps_working(page, files, what):
    folder = files["folder"]
    if what == "garbage":
        bad = folder / "garbage.onnx"
        bad.write_bytes(b"this is not an ONNX model\n" * 10)
        expected = "onnx"
    elif what == "truncated":
        bad = folder / "truncated.onnx"
        data = files["onnx"].read_bytes()
        bad.write_bytes(data[: len(data) // 2])
        expected = "onnx"
    else:
        import onnx
        from onnx import TensorProto, helper
        graph = helper.make_graph(
            [helper.make_node("FancyOp", ["x"], ["y"], domain="com.example")], "g",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 5])])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                        helper.make_opsetid("com.example", 1)])
        bad = folder / "unsupported.onnx"
        onnx.save(model, bad)
        expected = "FancyOp (com.example, opset 1)"
    assert wait_ready(page, PAGE) == "ready"
    page.locator(".sample").nth(1).click()
    label, _ = predicted(page)
    before = page.get_attribute("#model-name", "data-model")
    open_model(page, bad, before)
    status = page.text_content("#onnx-status")
    assert status.startswith(f"error: {bad.name}: ") and expected in status, status
    assert "Traceback" not in status
    assert page.text_content("#status") == "ready"
    assert page.get_attribute("#model-name", "data-model") == before  # the model in use stays
    page.locator(".sample").nth(2).click()
    assert predicted(page)[0] != label  # classified anew, by the shipped model
    page.locator(".sample").nth(1).click()
    assert predicted(page)[0] == label
    # and a good file still loads after the bad one
    open_model(page, files["onnx"], before)
    assert page.text_content("#model-name") == "colour.onnx"
    got, _ = predicted(page)
    assert got.startswith("class ")


def test_other_input_layouts_nhwc_with_a_dynamic_batch_and_flat_grayscale(page, files):
    """A PyTorch model taking [batch, 32, 32, 3] (channels last, batch left dynamic) and an
    ember MLP taking [1, 784] grayscale: the page feeds each its layout."""
    import torch

    from ember import nn
    folder = files["folder"]
    torch.manual_seed(0)

    class ChannelsLast(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv, self.fc = torch.nn.Conv2d(3, 4, 3, stride=2), torch.nn.Linear(4 * 225, 3)

        def forward(self, x):
            return self.fc(self.conv(x.permute(0, 3, 1, 2)).relu().flatten(1)) * 4

    nhwc = folder / "nhwc.onnx"
    torch.onnx.export(ChannelsLast().eval(), (torch.zeros(1, 32, 32, 3),), str(nhwc),
                      input_names=["image"], dynamic_axes={"image": {0: "batch"}}, dynamo=False)
    class Mlp(nn.Module):
        def __init__(self):
            self.a, self.b = nn.Linear(784, 32), nn.Linear(32, 4)

        def forward(self, x):
            return self.b(self.a(x).relu()) * 3

    ember.seed(4)
    mlp = Mlp().eval()
    flat = eonnx.save(mlp, folder / "flat.onnx", Tensor.from_data(np.zeros((1, 784), np.float32)))

    assert wait_ready(page, PAGE) == "ready"
    path, rgb = files["images"][1]
    open_model(page, nhwc, page.get_attribute("#model-name", "data-model"))
    assert '["batch",32,32,3]' in page.text_content("#onnx-status")
    page.set_input_files("#image-input", str(path))
    _, probs = predicted(page)
    logits = eonnx.load(nhwc)((rgb.astype(np.float32) / 255)[None]).to_numpy()[0]
    want = np.exp(logits - logits.max())
    np.testing.assert_allclose([probs[f"class {i}"] for i in range(3)], want / want.sum(),
                               atol=1e-5)

    gray = np.zeros((28, 28), np.uint8)  # dark border: the page's preprocessing keeps it as is
    gray[4:24, 6:22] = np.random.default_rng(1).integers(0, 256, (20, 16))
    write_png(folder / "gray.png", np.repeat(gray[:, :, None], 3, axis=2))
    open_model(page, flat, page.get_attribute("#model-name", "data-model"))
    assert "[1,784]" in page.text_content("#onnx-status")
    page.set_input_files("#image-input", str(folder / "gray.png"))
    _, probs = predicted(page)
    logits = eonnx.load(flat)((gray.astype(np.float32) / 255).reshape(1, 784)).to_numpy()[0]
    want = np.exp(logits - logits.max())
    np.testing.assert_allclose([probs[f"class {i}"] for i in range(4)], want / want.sum(),
                               atol=1e-5)
    top = np.sort(want)[-2:]
    assert top[1] > 1.01 * top[0]  # (a clear top class, so the check means something)
