#!/usr/bin/env python3
"""Write a copy of an MJCF model in which every mesh geom is a primitive.

Why: MuJoCo Menagerie's arms ship with binary STL/OBJ meshes that chainfd does not need:
`chainfd check` compares smooth dynamics, which depend on the bodies' inertias and joints,
not on geometry. The copy is one XML file (includes inlined) that loads without the
model's asset directory.

What changes:
  * every mesh/hfield geom becomes a box fitted to its bounding box, in the geom's place,
    when the original model compiles (its mesh files are present); otherwise a sphere of
    radius FALLBACK_RADIUS at the geom's authored pos, which collides with nothing (it is
    not the mesh's shape: it must not invent contacts);
  * every mesh, hfield, texture and skin asset is dropped (materials lose their textures);
  * every explicit <inertial> is kept character for character. A body whose inertia came
    from mesh geoms gets that inertia as an explicit <inertial> when the original compiles;
    otherwise its inertia now comes from the substitute primitives, and this is reported.
  * --attach: a second model (e.g. a gripper), converted the same way and written beside
    OUT, is attached to a body of the first with MJCF <attach>.

How: mjSpec (MuJoCo's Python API) resolves default classes (which geoms are meshes) and
compiles the original for the fits; the edits are made on the XML text itself, because
MjSpec.to_xml() writes numbers with 6 significant digits and rewrites fullinertia as
principal axes, which would not keep the inertias exactly. The result is checked: it must
load, and every body's mass, inertia and frames must equal the original's bit for bit
(bodies whose inertia came from meshes excepted).

Usage:
  menagerie_primitives.py MODEL.xml OUT.xml [--attach CHILD.xml --to BODY
                          [--pos X Y Z] [--quat W X Y Z] [--prefix P]]
"""
import argparse
import os
import sys
import xml.etree.ElementTree as ET

import mujoco
import numpy as np

FALLBACK_RADIUS = 0.01  # sphere radius (m) used when the mesh file is not available
MESH_TYPES = (mujoco.mjtGeom.mjGEOM_MESH, mujoco.mjtGeom.mjGEOM_HFIELD)
DROPPED_ASSETS = ("mesh", "hfield", "texture", "skin")
ORIENTATIONS = ("quat", "euler", "axisangle", "xyaxes", "zaxis", "fromto")


def fmt(values):
  return " ".join(repr(float(v)) for v in values)


def inline_includes(elem, base_dir):
  """Replaces every <include file=...> under elem by the included file's children."""
  for i, child in enumerate(list(elem)):
    if child.tag == "include":
      path = os.path.join(base_dir, child.get("file"))
      sub = ET.parse(path).getroot()
      inline_includes(sub, os.path.dirname(path))
      elem.remove(child)
      for k, c in enumerate(list(sub)):
        elem.insert(i + k, c)
      return inline_includes(elem, base_dir)  # indices moved: start over
    inline_includes(child, base_dir)


def body_elements(root):
  """The <body> elements of the worldbody, in document (= MuJoCo's body) order, world first."""
  world = root.find("worldbody")
  return [world] + list(world.iter("body"))


def direct_geoms(body):
  """A body's own <geom>s, including those in its <frame>s, in document order."""
  out = []
  for c in body:
    if c.tag == "geom":
      out.append(c)
    elif c.tag == "frame":
      out += direct_geoms(c)
  return out


def reference(path):
  """The original model compiled; without its mesh files, with its mesh geoms and file assets
  deleted (bodies whose inertia came from meshes get a dummy one: they are not compared)."""
  try:
    return mujoco.MjSpec.from_file(path).compile()
  except Exception:
    pass
  s = mujoco.MjSpec.from_file(path)
  for body in s.bodies[1:]:
    if not body.explicitinertial and any(g.type in MESH_TYPES for g in body.geoms):
      body.explicitinertial, body.mass, body.inertia = True, 1.0, [1.0, 1.0, 1.0]
  for g in list(s.geoms):
    if g.type in MESH_TYPES:
      s.delete(g)
  for mat in s.materials:
    mat.textures = [""] * len(mat.textures)
  for a in list(s.meshes) + list(s.hfields) + list(s.textures) + list(s.skins):
    s.delete(a)
  return s.compile()


def convert(path, label=None):
  """Returns (root, notes, derived): converted XML root, what to report, and the names of
  bodies whose inertia came from mesh geoms."""
  label = label or path
  notes, derived = [], set()
  spec = mujoco.MjSpec.from_file(path)  # defaults resolved: each geom's real type
  model = None
  try:
    model = mujoco.MjSpec.from_file(path).compile()  # same element order as spec
  except Exception as e:  # missing mesh/texture files
    notes.append(f"{label}: original does not compile ({str(e).splitlines()[0]}); "
                 f"mesh geoms become non-colliding {FALLBACK_RADIUS} m spheres at their authored pos")

  root = ET.parse(path).getroot()
  inline_includes(root, os.path.dirname(os.path.abspath(path)))
  bodies = body_elements(root)
  if len(bodies) != len(spec.bodies):
    raise SystemExit(f"{label}: {len(bodies)} <body> elements, {len(spec.bodies)} bodies in mjSpec")
  from_geoms = spec.compiler.inertiafromgeom == mujoco.mjtInertiaFromGeom.mjINERTIAFROMGEOM_TRUE

  nconv, gid = 0, 0
  for b, (belem, sbody) in enumerate(zip(bodies, spec.bodies)):
    geoms = direct_geoms(belem)
    sgeoms = list(sbody.geoms)
    if len(geoms) != len(sgeoms):
      raise SystemExit(f"{label}: body {sbody.name!r}: {len(geoms)} <geom>s, mjSpec has {len(sgeoms)}")
    has_mesh = any(g.type in MESH_TYPES for g in sgeoms)

    # A body whose inertia comes from mesh geoms (no explicit <inertial>, or inertiafromgeom).
    if b > 0 and has_mesh and (from_geoms or not sbody.explicitinertial):
      name = sbody.name or f"body #{b}"
      derived.add(sbody.name)
      if model is not None and not from_geoms:
        inertial = ET.Element("inertial", {
            "pos": fmt(model.body_ipos[b]), "quat": fmt(model.body_iquat[b]),
            "mass": repr(float(model.body_mass[b])), "diaginertia": fmt(model.body_inertia[b])})
        belem.insert(0, inertial)
        notes.append(f"{label}: body {name}: inertia came from mesh geoms; written as <inertial>")
      else:
        notes.append(f"{label}: body {name}: inertia came from mesh geoms; now from the "
                     f"substitute primitives (differs from the original)")

    for gelem, sgeom in zip(geoms, sgeoms):
      g = gid
      gid += 1
      if sgeom.type not in MESH_TYPES:
        continue
      for attr in ("mesh", "hfield", "fitscale", "size"):
        gelem.attrib.pop(attr, None)
      in_frame = gelem not in list(belem)
      if model is not None:  # box fitted to the mesh's bounding box
        R = np.empty(9)
        mujoco.mju_quat2Mat(R, model.geom_quat[g])
        center, half = model.geom_aabb[g, :3], model.geom_aabb[g, 3:]
        gelem.set("type", "box")
        gelem.set("size", fmt(np.maximum(half, 1e-4)))
        if not in_frame:  # compiled pose is in the body frame (in a <frame>: authored pose kept)
          for attr in ORIENTATIONS:
            gelem.attrib.pop(attr, None)
          gelem.set("pos", fmt(model.geom_pos[g] + R.reshape(3, 3) @ center))
          gelem.set("quat", fmt(model.geom_quat[g]))
      else:  # not the mesh's shape: it must not make contacts the original would not
        gelem.set("type", "sphere")
        gelem.set("size", repr(FALLBACK_RADIUS))
        gelem.set("contype", "0")
        gelem.set("conaffinity", "0")
      nconv += 1
  notes.append(f"{label}: {nconv} mesh/hfield geoms replaced")

  # Drop the assets that need files; materials keep their colours.
  for asset in root.iter("asset"):
    for a in list(asset):
      if a.tag in DROPPED_ASSETS:
        asset.remove(a)
  for mat in root.iter("material"):
    mat.attrib.pop("texture", None)
  # Default classes: a geom default of type mesh would need a mesh; hfield/mesh defaults go.
  for d in root.iter("default"):
    for c in list(d):
      if c.tag == "geom" and c.get("type") in ("mesh", "hfield"):
        c.set("type", "box")
  return root, notes, derived


def verify(out, path, derived, label):
  """The written model loads, and its bodies equal the original's (meshes stripped)."""
  m = mujoco.MjModel.from_xml_path(out)
  ref = reference(path)
  worst = 0.0
  for b in range(ref.nbody):
    name = mujoco.mj_id2name(ref, mujoco.mjtObj.mjOBJ_BODY, b)
    if name in derived:
      continue
    mb = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_BODY, name) if name else b
    for f in ("body_mass", "body_inertia", "body_ipos", "body_iquat", "body_pos", "body_quat"):
      worst = max(worst, float(np.max(np.abs(getattr(m, f)[mb] - getattr(ref, f)[b]))))
  return m, f"{label}: bodies' mass/inertia/frames vs the original: max |diff| {worst:g}"


def main():
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("model")
  ap.add_argument("out")
  ap.add_argument("--attach", help="a second MJCF model (e.g. a gripper) to attach")
  ap.add_argument("--to", help="body of MODEL that the attached model's root hangs from")
  ap.add_argument("--pos", type=float, nargs=3, default=[0, 0, 0])
  ap.add_argument("--quat", type=float, nargs=4, default=[1, 0, 0, 0])
  ap.add_argument("--prefix", default="", help="name prefix for the attached model's elements")
  a = ap.parse_args()

  root, notes, derived = convert(a.model)
  if a.attach:
    if not a.to:
      ap.error("--attach needs --to BODY")
    croot, more, cderived = convert(a.attach)
    notes += more
    # The converted child goes beside OUT; <attach> puts its world in a frame of body --to.
    child_out = os.path.splitext(a.out)[0] + "." + os.path.basename(a.attach)
    ET.indent(croot, space="  ")
    ET.ElementTree(croot).write(child_out, encoding="unicode")
    parent = next((e for e in root.iter("body") if e.get("name") == a.to), None)
    if parent is None:
      ap.error(f"no body named {a.to!r} in {a.model}")
    asset = root.find("asset")
    if asset is None:
      asset = ET.SubElement(root, "asset")
    ET.SubElement(asset, "model", name="attached", file=os.path.basename(child_out))
    frame = ET.SubElement(parent, "frame", pos=fmt(a.pos), quat=fmt(a.quat))
    ET.SubElement(frame, "attach", model="attached", prefix=a.prefix)
    notes.append(f"attached {child_out} to body {a.to!r} (frame pos {a.pos} quat {a.quat})")
    derived |= {a.prefix + n for n in cderived}

  ET.indent(root, space="  ")
  ET.ElementTree(root).write(a.out, encoding="unicode")
  m, line = verify(a.out, a.model, derived, a.model)
  notes.append(line)
  if a.attach:  # the attached bodies, against the child on its own
    notes.append(verify(child_out, a.attach, cderived, a.attach)[1])
  for n in notes:
    print(n, file=sys.stderr)
  print(f"{a.out}: nbody {m.nbody} njnt {m.njnt} nq {m.nq} nv {m.nv} nu {m.nu} "
        f"ntendon {m.ntendon} neq {m.neq} nmesh {m.nmesh}", file=sys.stderr)


if __name__ == "__main__":
  main()
