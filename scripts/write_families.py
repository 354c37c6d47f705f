"""Write data/families.json (the `mlxfit families` table) from the test fixtures.

Run from the repository root after adding a family row or fixture:
    PYTHONPATH=src python scripts/write_families.py
tests/test_families_verb.py fails until the file matches the fixtures.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def fixture_configs(root: Path = ROOT) -> dict[str, tuple[dict, bool]]:
    fixtures = root / "tests" / "fixtures"
    manifest = json.loads((fixtures / "families" / "MANIFEST.json").read_text())
    out = {}
    for p in sorted((fixtures / "configs").glob("*.json")):
        out[f"configs/{p.name}"] = (json.loads(p.read_text()), False)
    for entry in manifest.values():
        p = fixtures / "families" / entry["file"]
        out[f"families/{p.name}"] = (json.loads(p.read_text()), bool(entry["synthetic"]))
    return out


def main() -> int:
    sys.path.insert(0, str(ROOT / "src"))
    from mlxfit.model.families import NOT_SUPPORTED
    from mlxfit.verbs.families import build_table

    configs = {k: v for k, v in fixture_configs().items()
               if v[0].get("model_type") not in NOT_SUPPORTED}
    table = build_table(configs)
    (ROOT / "data" / "families.json").write_text(json.dumps(table, indent=1) + "\n")
    print(f"data/families.json: {len(table)} families")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
