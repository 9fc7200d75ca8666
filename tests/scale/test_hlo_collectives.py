"""posjax/training/collectives.py reads the collectives and their bytes out of compiled HLO text.

One tiny program with one collective of each kind, compiled (not run) on 8 simulated CPU
devices in a subprocess (this pytest process keeps one device), and a hand-written HLO
excerpt for the forms the CPU backend does not print (async pairs, iota replica groups).
"""

import subprocess
import sys

from posjax.training import collectives as col
from tests.reliability import runner
import pytest

# Slow tier: several processes or simulated devices (meshes).
pytestmark = pytest.mark.slow

# shard_map over 8 devices, per-device x: f32[8, 16] (512 B). Collectives over the 8-device
# axis 'i': psum (all-reduce, 512 B), all_gather (result 8 x 512 B), psum_scatter (input
# 512 B, result 64 B), all_to_all (512 B), ppermute (512 B).
PROGRAM = """
import functools, sys
import jax, jax.numpy as jnp
from jax.sharding import Mesh, PartitionSpec as P
mesh = Mesh(jax.devices(), ("i",))

@functools.partial(jax.shard_map, mesh=mesh, in_specs=P("i"), out_specs=P("i"))
def f(x):
    a = jax.lax.psum(x, "i")
    b = jax.lax.all_gather(x, "i", tiled=True)
    c = jax.lax.psum_scatter(x, "i", scatter_dimension=0, tiled=True)
    d = jax.lax.all_to_all(x, "i", 0, 0, tiled=True)
    e = jax.lax.ppermute(x, "i", [(j, (j + 1) % 8) for j in range(8)])
    return a.sum() + b.sum() + c.sum() + d.sum() + e.sum() + x

x = jax.ShapeDtypeStruct((64, 16), jnp.float32)
sys.stdout.write(jax.jit(f).lower(x).compile().as_text())
"""


def test_collectives_of_a_compiled_program():
    env = dict(runner.make_env(), XLA_FLAGS="--xla_force_host_platform_device_count=8")
    env.pop("JAX_COMPILATION_CACHE_DIR", None)
    proc = subprocess.run([sys.executable, "-c", PROGRAM], cwd=runner.REPO, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    ops = col.collectives(proc.stdout)
    by_kind = {}
    for op in ops:
        by_kind.setdefault(op.kind, []).append(op)
    assert sorted(by_kind) == sorted(col.KINDS), (by_kind, proc.stdout[-3000:])
    x = 8 * 16 * 4
    # one op of each kind (XLA may combine or split; the totals are what must hold)
    t = col.totals(ops)
    assert t["all-reduce"] == x
    assert t["all-gather"] == 8 * x
    assert t["reduce-scatter"] == x
    assert t["all-to-all"] == x
    assert t["collective-permute"] == x
    assert t["total"] == 12 * x
    assert all(op.group == 8 or op.kind == "collective-permute" for op in ops), ops
    assert not any(op.in_loop for op in ops)


HLO = """
HloModule m, entry_computation_layout={()->f32[]}

%body.1 (p: (s32[], f32[8,4])) -> (s32[], f32[8,4]) {
  %ar.2 = f32[8,4]{1,0} all-reduce(%gte), channel_id=3, replica_groups=[2,4]<=[8], to_apply=%add
  ROOT %t = (s32[], f32[8,4]{1,0}) tuple(%i, %ar.2)
}

ENTRY %main.9 (param: bf16[16,32]) -> f32[] {
  %ags = (bf16[4,32]{1,0}, bf16[16,32]{1,0}) all-gather-start(bf16[4,32]{1,0} %p), channel_id=1, replica_groups={{0,1,2,3},{4,5,6,7}}, dimensions={0}
  %agd = bf16[16,32]{1,0} all-gather-done(%ags)
  %rs = f32[2,32]{1,0} reduce-scatter(%x), channel_id=2, replica_groups=[4,2]<=[2,4]T(1,0), dimensions={0}, to_apply=%add
  %ar = (f32[3]{0}, bf16[5]{0}) all-reduce(%a, %b), channel_id=4, replica_groups={}, to_apply=%add
  %arp = f32[2,8]{1,0} all-reduce(%c), channel_id=6, replica_groups=[4,2]<=[8], to_apply=%add.2.clone_promoted, metadata={}
  %cps = (f32[6]{0}, f32[6]{0}, u32[], u32[]) collective-permute-start(%c), channel_id=5, source_target_pairs={{0,1},{1,0}}
  %cpd = f32[6]{0} collective-permute-done(%cps)
  %w = (s32[], f32[8,4]{1,0}) while(%init), condition=%cond.1, body=%body.1
  ROOT %r = f32[] constant(0)
}
"""


def test_collectives_of_handwritten_hlo():
    ops = {op.kind: op for op in col.collectives(HLO)}
    assert ops["all-gather"].bytes == 16 * 32 * 2 and ops["all-gather"].group == 4
    assert ops["reduce-scatter"].bytes == 2 * 32 * 4 * 2 and ops["reduce-scatter"].group == 2
    assert ops["collective-permute"].bytes == 6 * 4
    loop_ar = [op for op in col.collectives(HLO) if op.in_loop]
    assert len(loop_ar) == 1 and loop_ar[0].bytes == 8 * 4 * 4 and loop_ar[0].group == 4
    assert loop_ar[0].computation == "body.1"
    entry_ar = [op for op in col.collectives(HLO) if op.kind == "all-reduce" and not op.in_loop]
    assert entry_ar[0].bytes == 3 * 4 + 5 * 2 and entry_ar[0].group == 0
    assert not entry_ar[0].promoted and entry_ar[1].promoted and entry_ar[1].bytes == 2 * 8 * 4
    raw = 16 * 32 * 2 + 2 * 32 * 4 * 2 + 6 * 4 + 8 * 4 * 4 + 3 * 4 + 5 * 2 + 2 * 8 * 4
    assert col.totals(col.collectives(HLO))["total"] == raw
    assert col.totals(col.collectives(HLO))["promoted"] == 2 * 8 * 4


def test_group_size_forms():
    assert col.group_size("replica_groups={{0,4},{1,5},{2,6},{3,7}}, dimensions={0}") == 2
    assert col.group_size("replica_groups=[2,4]<=[8], to_apply=%add") == 4
    assert col.group_size("replica_groups=mesh['axis_0'=2,'axis_1'=1,'axis_2'=4] {'axis_2'},") == 4
    # the mesh form with a device order: the braced axes after device_ids are the group
    assert col.group_size("replica_groups=mesh['axis_0'=4,'axis_1'=2], "
                          "device_ids=([2,4]T(1,0)) {'axis_0'}, dimensions={0}") == 4
    assert col.group_size("replica_groups=mesh['a'=2,'b'=2,'c'=2] {'a','c'}, x") == 4
    assert col.group_size("replica_groups={}, to_apply=%add") == 0


def test_shape_bytes():
    assert col.shape_bytes("(f32[2,3]{1,0}, bf16[4]{0}, pred[])") == [24, 8, 1]
    assert col.shape_bytes("s32[]") == [4]
