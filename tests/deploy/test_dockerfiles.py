"""What can be checked of docker/ without a Docker engine: every COPY source
exists and survives .dockerignore, the build runs the README's own build
command with options CMakeLists.txt defines, base images are pinned, the
runtime runs as a non-root user, the ENTRYPOINT + CMD command line is accepted
by the real binary (a daemon started with it, the model path mapped to the
bundled model, answers /health), docker/runtime-libs.sh collects what ldd
lists, and compose.yaml wires Prometheus and Grafana to files that exist."""

import fnmatch
import json
import os
import re
import shlex
import subprocess
import tempfile
import unittest

import yaml

from deploy_util import SOURCE_DIR, Daemon, env, parse_args, read_text, serve_flags

DOCKER = os.path.join(SOURCE_DIR, "docker")


def instructions(path):
    """[(INSTRUCTION, argument string)] of a Dockerfile, continuation lines joined."""
    text = read_text(path)
    text = re.sub(r"\\\n", " ", text)
    out = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        op, _, rest = line.partition(" ")
        out.append((op.upper(), rest.strip()))
    return out


def exec_form(arg):
    value = json.loads(arg)
    assert isinstance(value, list), f"not the exec (JSON) form: {arg}"
    return value


def dockerignore_patterns():
    lines = read_text(os.path.join(SOURCE_DIR, ".dockerignore")).splitlines()
    return [l.strip() for l in lines if l.strip() and not l.startswith("#")]


def ignored(path, patterns):
    parts = path.rstrip("/").split("/")
    for pat in patterns:
        pat = pat.rstrip("/")
        for i in range(1, len(parts) + 1):
            prefix = "/".join(parts[:i])
            if fnmatch.fnmatchcase(prefix, pat) or (pat.startswith("**/") and fnmatch.fnmatchcase(parts[i - 1], pat[3:])):
                return True
    return False


class DockerfileTest(unittest.TestCase):
    FILES = {"Dockerfile.cpu": "/models/stories260K", "Dockerfile.cuda": "/models"}

    @classmethod
    def setUpClass(cls):
        cls.help_flags = serve_flags()
        cls.parsed = {name: instructions(os.path.join(DOCKER, name)) for name in cls.FILES}

    def test_copy_sources_exist_and_are_not_ignored(self):
        patterns = dockerignore_patterns()
        for name, ins in self.parsed.items():
            for op, arg in ins:
                if op not in ("COPY", "ADD") or "--from=" in arg:
                    continue
                *sources, _dest = shlex.split(arg)
                for src in sources:
                    with self.subTest(dockerfile=name, source=src):
                        self.assertTrue(os.path.exists(os.path.join(SOURCE_DIR, src)), src)
                        self.assertFalse(ignored(src, patterns), f"{src} is excluded by .dockerignore")

    def test_dockerignore_keeps_build_products_out(self):
        patterns = dockerignore_patterns()
        for path in ("build", "build-asan", "tests/integration/node_modules", ".git"):
            self.assertTrue(ignored(path, patterns), path)

    def test_base_images_pinned(self):
        for name, ins in self.parsed.items():
            froms = [arg.split()[0] for op, arg in ins if op == "FROM"]
            self.assertGreaterEqual(len(froms), 2, f"{name}: multi-stage")
            for image in froms:
                with self.subTest(dockerfile=name, image=image):
                    self.assertRegex(image, r"^[\w./-]+:[\w.-]+$")
                    self.assertNotIn("latest", image.split(":")[1])
                    self.assertRegex(image.split(":")[1], r"\d")  # a version, not a moving name
        cuda = [arg.split()[0] for op, arg in self.parsed["Dockerfile.cuda"] if op == "FROM"]
        self.assertRegex(cuda[0], r"^nvidia/cuda:[\d.]+-devel-")
        self.assertRegex(cuda[-1], r"^nvidia/cuda:[\d.]+-runtime-")

    def test_build_step_is_the_readmes(self):
        readme = read_text(os.path.join(SOURCE_DIR, "README.md"))
        self.assertIn("make build", readme)
        cmake = read_text(os.path.join(SOURCE_DIR, "CMakeLists.txt"))
        options = set(re.findall(r"^option\((\w+)", cmake, re.M))
        for name, ins in self.parsed.items():
            runs = [arg for op, arg in ins if op == "RUN" and "make build" in arg]
            self.assertEqual(len(runs), 1, name)
            m = re.search(r'CMAKE_FLAGS="([^"]*)"', runs[0])
            for flag in m.group(1).split():
                self.assertIn(flag.split("=")[0].removeprefix("-D"), options, f"{name}: {flag}")
            self.assertIn("-DTQ_NATIVE=OFF", m.group(1))  # the image runs on other CPUs
            self.assertIn(f"-DTQ_CUDA={'ON' if 'cuda' in name else 'OFF'}", m.group(1))

    def test_non_root_user(self):
        for name, ins in self.parsed.items():
            last_stage = ins[max(i for i, (op, _) in enumerate(ins) if op == "FROM"):]
            users = [arg for op, arg in last_stage if op == "USER"]
            self.assertTrue(users, name)
            self.assertNotIn(users[-1].split(":")[0], ("0", "root"), name)

    def test_entrypoint_runs_the_daemon(self):
        for name, model in self.FILES.items():
            with self.subTest(dockerfile=name):
                ins = self.parsed[name]
                (entry,) = [exec_form(a) for op, a in ins if op == "ENTRYPOINT"]
                (cmd,) = [exec_form(a) for op, a in ins if op == "CMD"]
                self.assertEqual(entry, ["/opt/tqserve/bin/tqserve", "serve"])
                run = " ".join(a for op, a in ins if op == "RUN")
                self.assertIn("install -D build/bin/tqserve /opt/tqserve/bin/tqserve", run)
                flags = parse_args(cmd)
                for flag in flags:
                    self.assertIn(flag, self.help_flags, f"{name}: {flag}")
                self.assertEqual(flags["--model"], model)
                self.assertEqual(flags["--host"], "0.0.0.0")
                exposed = {int(p) for op, a in ins if op == "EXPOSE" for p in a.split()}
                self.assertEqual(exposed, {int(flags["--port"]), int(flags["--grpc-port"])})
                with Daemon(dict(flags, **{"--model": env("TQSERVE_MODEL")})) as d:
                    self.assertEqual(d.get("/health")[0], 200)

    def test_cpu_image_carries_the_bundled_model(self):
        ins = self.parsed["Dockerfile.cpu"]
        self.assertIn(("COPY", "--from=build /src/models/stories260K /models/stories260K"), ins)

    def test_runtime_libs_collects_what_ldd_lists(self):
        binary = env("TQSERVE_BIN")
        ldd = subprocess.run(["ldd", binary], capture_output=True, text=True, check=True).stdout
        want = {m.group(1) for m in re.finditer(r"^\s*(\S+) => /", ldd, re.M)}
        want = {n for n in want if not re.match(r"(libc|libm|libdl|librt|libpthread)\.so|ld-linux|libcuda\.so|libnvidia-", n)}
        self.assertTrue({n for n in want if n.startswith("libstdc++")}, ldd)
        with tempfile.TemporaryDirectory() as tmp:
            subprocess.run([os.path.join(DOCKER, "runtime-libs.sh"), binary, tmp], check=True)
            self.assertEqual(set(os.listdir(tmp)), want)


class ComposeTest(unittest.TestCase):
    def test_services_and_mounts(self):
        with open(os.path.join(DOCKER, "compose.yaml")) as f:
            c = yaml.safe_load(f)
        s = c["services"]
        self.assertEqual(set(s), {"tqserve", "prometheus", "grafana"})
        self.assertTrue(os.path.exists(os.path.join(DOCKER, s["tqserve"]["build"]["context"], s["tqserve"]["build"]["dockerfile"])))
        for svc in ("prometheus", "grafana"):
            self.assertRegex(s[svc]["image"], r":v?\d[\w.]*$")
            for vol in s[svc]["volumes"]:
                src = vol.split(":")[0]
                self.assertTrue(os.path.exists(os.path.join(DOCKER, src)), vol)
        # Prometheus scrapes the tqserve service on the port its CMD listens on.
        with open(os.path.join(SOURCE_DIR, "deploy/prometheus/prometheus.yml")) as f:
            prom = yaml.safe_load(f)
        (job,) = prom["scrape_configs"]
        self.assertEqual(job["job_name"], "tqserve")
        cmd = [exec_form(a) for op, a in instructions(os.path.join(DOCKER, "Dockerfile.cpu")) if op == "CMD"][0]
        self.assertEqual(job["static_configs"][0]["targets"], [f"tqserve:{parse_args(cmd)['--port']}"])
        self.assertIn(f"{parse_args(cmd)['--port']}:{parse_args(cmd)['--port']}", s["tqserve"]["ports"])
        # The grace period covers the drain.
        grace = int(s["tqserve"]["stop_grace_period"].rstrip("s"))
        self.assertGreater(grace, float(parse_args(cmd)["--shutdown-timeout"]))


if __name__ == "__main__":
    unittest.main(verbosity=2)
