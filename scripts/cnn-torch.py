"""Issue 44's small CNN training step in PyTorch, timed as
`tests/examples/cnn_step.rs` times kael's (the same shapes, init scales,
batch and Adam): the median of 60 steps. Interleave the two:

    cargo build --release -p kael-tests --example cnn_step
    for i in 1 2 3; do target/release/examples/cnn_step; python3 scripts/cnn-torch.py 2; done

The argument is PyTorch's thread count (default 2).
"""
import torch, time, sys
import torch.nn.functional as F
torch.manual_seed(0)
threads = int(sys.argv[1]) if len(sys.argv) > 1 else 2
torch.set_num_threads(threads)
w1 = (torch.randn(16,1,3,3)*0.3).requires_grad_()
b1 = (torch.randn(16)*0.1).requires_grad_()
w2 = (torch.randn(32,16,3,3)*0.08).requires_grad_()
b2 = (torch.randn(32)*0.1).requires_grad_()
wl = (torch.randn(1568,10)*0.02).requires_grad_()
x = torch.randn(64,1,28,28)
y = torch.arange(64) % 10
opt = torch.optim.Adam([w1,b1,w2,b2,wl])
ts = []
for _ in range(60):
    t = time.perf_counter()
    opt.zero_grad()
    h = F.max_pool2d(F.relu(F.conv2d(x, w1, b1, padding=1)), 2)
    h = F.max_pool2d(F.relu(F.conv2d(h, w2, b2, padding=1)), 2)
    loss = F.cross_entropy(h.reshape(64, 1568) @ wl, y)
    loss.backward()
    opt.step()
    ts.append((time.perf_counter() - t) * 1e3)
ts.sort()
print(f"torch {threads} threads: cnn step median {ts[30]:.1f} ms (min {ts[0]:.1f})")
