"""deploy/grafana/tqserve.json is a loadable Grafana dashboard model
(https://grafana.com/docs/grafana/latest/dashboards/build-dashboards/view-dashboard-json-model/):
schemaVersion, unique panel ids, a datasource variable every query uses,
panels inside the 24-column grid, and only defined template variables in the
PromQL. Whether each expression parses and returns data is the integration
test tests/integration/prometheus.test.mjs (a real Prometheus)."""

import json
import os
import re
import unittest

from deploy_util import SOURCE_DIR

DASHBOARD = os.path.join(SOURCE_DIR, "deploy/grafana/tqserve.json")
# Grafana's global variables that may appear in queries.
BUILTINS = {"__rate_interval", "__interval", "__range"}


def all_panels(panels):
    for p in panels:
        yield p
        yield from all_panels(p.get("panels", []))


class DashboardTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        with open(DASHBOARD) as f:
            cls.d = json.load(f)
        cls.vars = {v["name"]: v for v in cls.d["templating"]["list"]}

    def test_top_level_model(self):
        d = self.d
        self.assertIsInstance(d["schemaVersion"], int)
        self.assertGreaterEqual(d["schemaVersion"], 36)  # datasource refs as {type, uid} objects
        self.assertTrue(d["title"])
        self.assertRegex(d["uid"], r"^[A-Za-z0-9_-]{1,40}$")
        self.assertIn("from", d["time"])
        self.assertIsInstance(d["panels"], list)

    def test_unique_panel_ids_and_grid(self):
        ids = [p["id"] for p in all_panels(self.d["panels"])]
        self.assertEqual(len(ids), len(set(ids)), ids)
        self.assertTrue(all(isinstance(i, int) and i > 0 for i in ids))
        cells = set()
        for p in all_panels(self.d["panels"]):
            g = p["gridPos"]
            self.assertTrue(0 <= g["x"] and g["w"] > 0 and g["x"] + g["w"] <= 24, p["title"])
            for x in range(g["x"], g["x"] + g["w"]):
                for y in range(g["y"], g["y"] + g["h"]):
                    self.assertNotIn((x, y), cells, f"panel {p['title']!r} overlaps another")
                    cells.add((x, y))

    def test_datasource_variable_used_everywhere(self):
        ds = self.vars["datasource"]
        self.assertEqual(ds["type"], "datasource")
        self.assertEqual(ds["query"], "prometheus")
        for p in all_panels(self.d["panels"]):
            if p["type"] == "row":
                continue
            self.assertEqual(p["datasource"], {"type": "prometheus", "uid": "${datasource}"}, p["title"])
            refs = [t["refId"] for t in p["targets"]]
            self.assertEqual(len(refs), len(set(refs)), p["title"])
            for t in p["targets"]:
                self.assertEqual(t["datasource"]["uid"], "${datasource}")
                self.assertTrue(t["expr"].strip())

    def test_instance_and_rank_variables(self):
        for name in ("instance", "rank"):
            v = self.vars[name]
            self.assertEqual(v["type"], "query")
            self.assertEqual(v["datasource"]["uid"], "${datasource}")
            self.assertTrue(v["includeAll"])
            # "All" = .*, which also matches a series without the label: the
            # rank label only exists with tensor parallelism (issue 8).
            self.assertEqual(v["allValue"], ".*")
            self.assertTrue(re.fullmatch(v["allValue"], ""))
        self.assertRegex(self.vars["rank"]["query"], r"^label_values\(.+, rank\)$")

    def test_only_defined_variables(self):
        defined = set(self.vars) | BUILTINS
        exprs = [t["expr"] for p in all_panels(self.d["panels"]) for t in p.get("targets", [])]
        exprs += [v["query"] for v in self.vars.values() if v["type"] == "query"]
        for e in exprs:
            for name in re.findall(r"\$\{?(\w+)", e):
                self.assertIn(name, defined, e)

    def test_covers_the_issue_panels(self):
        exprs = " ".join(t["expr"] for p in all_panels(self.d["panels"]) for t in p.get("targets", []))
        for metric in ("tqserve_memory_weights_bytes", "tqserve_memory_kv_cache_bytes", "tqserve_kv_cache_used_tokens",
                       "tqserve_kv_cache_free_tokens", "tqserve_memory_device_bytes", "tqserve_num_requests_running",
                       "tqserve_num_requests_waiting", "tqserve_prompt_tokens", "tqserve_generation_tokens",
                       "tqserve_time_to_first_token_seconds:p99", "tqserve_inter_token_latency_seconds:p50",
                       "tqserve_e2e_request_latency_seconds:p99", "tqserve_num_preemptions", "tqserve_request_success",
                       "tqserve_request_failure", "tqserve_prefix_cache_hit_ratio", "tqserve_kv_cache_blocks{"):
            self.assertIn(metric, exprs)

    def test_prefix_cache_panels(self):
        panels = {p["title"]: p for p in all_panels(self.d["panels"])}
        hit = panels["Prefix cache hit rate"]
        self.assertEqual(hit["fieldConfig"]["defaults"]["unit"], "percentunit")
        self.assertEqual([t["expr"] for t in hit["targets"]],
                         ['instance:tqserve_prefix_cache_hit_ratio:rate5m{instance=~"$instance"}'])
        blocks = panels["KV cache blocks (used / cached / free)"]
        self.assertIn("by (instance, state)", blocks["targets"][0]["expr"])


if __name__ == "__main__":
    unittest.main(verbosity=2)
