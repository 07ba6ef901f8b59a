"""Train a small MLP on y = sin(x0) + x1^2 with AdamW, save a checkpoint,
load it into a fresh model and check it reproduces the trained outputs.

    python python/examples/train_mlp.py

Exits non-zero unless the loss falls at least tenfold and the reloaded
model's outputs equal the trained model's exactly (CI runs it).
"""

import os
import sys
import tempfile

import kael


class MLP(kael.nn.Module):
    def __init__(self):
        super().__init__()
        self.net = kael.nn.Sequential(
            kael.nn.Linear(2, 32),
            kael.nn.Tanh(),
            kael.nn.Linear(32, 32),
            kael.nn.Tanh(),
            kael.nn.Linear(32, 1),
        )

    def forward(self, x):
        return self.net(x)


def main():
    kael.manual_seed(0)
    x = kael.rand(256, 2) * 4 - 2
    y = (x[:, 0].sin() + x[:, 1] ** 2).unsqueeze(1)

    model = MLP()
    opt = kael.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.0)
    first = None
    for step in range(300):
        loss = kael.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if first is None:
            first = loss.item()
        if step % 100 == 0:
            print(f"step {step:3d}  loss {loss.item():.4f}")
    last = kael.nn.functional.mse_loss(model(x), y).item()
    print(f"loss {first:.4f} -> {last:.4f}")

    path = os.path.join(tempfile.mkdtemp(), "mlp.safetensors")
    kael.save(model.state_dict(), path)
    restored = MLP()
    restored.load_state_dict(kael.load(path))
    with kael.no_grad():
        same = (restored(x) == model(x)).all().item()
    print(f"checkpoint {path}: reloaded outputs identical: {same}")

    if not (last * 10 <= first and same):
        sys.exit("train_mlp: the loss did not fall tenfold or the checkpoint did not round-trip")


if __name__ == "__main__":
    main()
