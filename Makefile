# Thin entry points; tox does the work. See README.md.
PYTHON ?= python3
TOX := $(PYTHON) -m tox

.PHONY: test demo bench lint unit integration e2e e2e-kind crds release tools clean

# The whole test suite, from a fresh machine: installs tox, builds the local control plane into
# ~/.cache/lessor on first use, then runs every tox environment; the last one installs and
# starts docker when it is missing and runs the e2e scenarios in kind (e2e/kind).
test: tools
	$(TOX) run -e lint,unit,integration,e2e,e2e-kind

demo: tools
	$(TOX) run -e demo

# The benchmarks (bench/README.md): about 15 minutes; they report, never fail.
bench: tools
	$(TOX) run -e bench

# The release's artifacts in dist/, with their SHA256SUMS (docs/releasing.md): the sdist and the
# wheel, lessor's image as an OCI archive, the Helm chart. The release workflow runs it on a tag.
release: tools
	$(TOX) run -e release

lint unit integration e2e e2e-kind crds: tools
	$(TOX) run -e $@

crds-write:
	$(PYTHON) -m lessor.resources write crds --chart charts/lessor

tools:
	@$(PYTHON) -c "import tox, tox_uv" >/dev/null 2>&1 || \
		$(PYTHON) -m pip install --quiet "tox >= 4.20, < 5" "tox-uv ~= 1.11"

clean:
	rm -rf .tox build dist *.egg-info
