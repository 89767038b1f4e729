// The pause (sandbox) program of the real node's pods, built here: there is no registry to
// pull registry.k8s.io/pause from (hack/node.sh packs it as an OCI image).
module tflaunch.dev/hack/pause

go 1.26.0
