"""Loads a GPT saved by `diloco-lua run` into the PyTorch mirror (gpt.py) with
load_state_dict(strict=True) and prints its logits for a prompt, to compare with
`diloco-lua sample`/the Lua model: the file is read unchanged, names and layouts match.
  /usr/bin/python3 scripts/reference/load_in_torch.py runs/charlm/model.safetensors "The "
"""
import json
import sys
import torch
import safetensors_io
from gpt import GPT

tensors, meta = safetensors_io.load(sys.argv[1])
spec = json.loads(meta["diloco.model"])
assert spec.pop("arch") == "gpt", "not a GPT"
model = GPT(**{k: spec[k] for k in ("vocab", "ctx", "dim", "layers", "heads", "tied") if k in spec})
model.load_state_dict(tensors, strict=True)
prompt = (sys.argv[2] if len(sys.argv) > 2 else "The ").encode()
with torch.no_grad():
    logits = model(torch.tensor([list(prompt)], dtype=torch.long))
print("last-position logits[:4]:", [round(v, 5) for v in logits[-1, :4].tolist()])
print("most likely next byte:", repr(bytes([int(logits[-1].argmax())])))
