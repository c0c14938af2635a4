# Per-call cost of small tensor ops from Python in PyTorch (reference for op_overhead).
import sys, time, torch
torch.set_num_threads(1)
n = int(sys.argv[1]) if len(sys.argv) > 1 else 500000
a, b = torch.randn(4), torch.randn(4)
m = torch.randn(2, 2)

def bench(name, f):
    f(1000)
    best = min(_t(f) for _ in range(3))
    print(f"{name:<16s} {best / n * 1e9:8.1f}")

def _t(f):
    t0 = time.process_time(); f(n); return time.process_time() - t0

def py_call(k):
    g = lambda x, y: x
    for _ in range(k): g(a, b)
def add(k):
    for _ in range(k): a + b
def relu(k):
    for _ in range(k): a.relu()
def mm(k):
    for _ in range(k): m.matmul(m)

bench("lua_call", py_call)
bench("add", add)
bench("method_relu", relu)
bench("matmul_2x2", mm)
