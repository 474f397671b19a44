"""promtool (Debian's prometheus package) on deploy/prometheus: both scrape
configs, the rule files, and the alert unit tests
(deploy/prometheus/tests/tqserve-alerts.test.yml). Every tqserve_* metric the
rules name is one a running daemon exports."""

import glob
import os
import re
import shutil
import subprocess
import tempfile
import unittest

import yaml

from deploy_util import SOURCE_DIR, Daemon, env, read_text

PROM = os.path.join(SOURCE_DIR, "deploy/prometheus")
RULES = sorted(glob.glob(os.path.join(PROM, "rules/*.yml")))


def promtool(*args, cwd=PROM):
    tool = shutil.which("promtool")
    if tool is None:
        raise RuntimeError("promtool not found (scripts/install_deps.sh installs Debian's prometheus)")
    return subprocess.run([tool, *args], capture_output=True, text=True, cwd=cwd)


class PromtoolTest(unittest.TestCase):
    def assertPasses(self, out):
        self.assertEqual(out.returncode, 0, out.stdout + out.stderr)

    def test_check_config(self):
        self.assertPasses(promtool("check", "config", "prometheus.yml"))

    def test_check_kubernetes_config(self):
        out = promtool("check", "config", "prometheus-kubernetes.yml")
        if "field kubernetes_sd_configs not found" not in out.stdout + out.stderr:
            self.assertPasses(out)
            return
        # Debian's Prometheus is built without Kubernetes service discovery;
        # check everything else (relabel regexes, rule files) with the
        # discovery block swapped for a static target.
        print("NOTE: this promtool has no kubernetes_sd_configs; checking the rest of prometheus-kubernetes.yml")
        config = yaml.safe_load(read_text(os.path.join(PROM, "prometheus-kubernetes.yml")))
        config["rule_files"] = [os.path.join(PROM, r) for r in config["rule_files"]]
        for job in config["scrape_configs"]:
            self.assertEqual(job.pop("kubernetes_sd_configs"), [{"role": "pod"}])
            job["static_configs"] = [{"targets": ["127.0.0.1:1"]}]
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "prometheus.yml")
            with open(path, "w") as f:
                yaml.safe_dump(config, f)
            self.assertPasses(promtool("check", "config", path))

    def test_check_rules(self):
        out = promtool("check", "rules", *RULES)
        self.assertPasses(out)
        self.assertEqual(len(re.findall(r"SUCCESS: \d+ rules found", out.stdout)), len(RULES))

    def test_alert_unit_tests(self):
        out = promtool("test", "rules", "tests/tqserve-alerts.test.yml")
        self.assertPasses(out)
        self.assertIn("SUCCESS", out.stdout)

    def test_rules_name_real_metrics(self):
        names = set()
        for path in RULES:
            for group in yaml.safe_load(read_text(path))["groups"]:
                for rule in group["rules"]:
                    names |= set(re.findall(r"(?<![:\w])(tqserve_[a-z_]+)", rule["expr"]))
        with Daemon({"--model": env("TQSERVE_MODEL")}) as d:
            status, text = d.get("/metrics")
        self.assertEqual(status, 200)
        exported = set(re.findall(r"^(tqserve_[a-z_]+)", text, re.M))
        self.assertTrue(names)
        self.assertEqual(names - exported, set())


if __name__ == "__main__":
    unittest.main(verbosity=2)
