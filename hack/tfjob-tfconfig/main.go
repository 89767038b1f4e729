// Prints the TF_CONFIG training-operator v1.9.3 gives every pod of a TFJob, one JSON line per
// pod ({"pod": "<replica type>-<index>", "tf_config": "..." or null}), by calling its own
// TFJobReconciler.SetClusterSpec: the golden values of tests/data/tfjob/ (test rig only, never
// shipped). Usage: go run . < tfjob.yaml (CUSTOM_CLUSTER_DOMAIN as training-operator reads it).
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"

	kubeflowv1 "github.com/kubeflow/training-operator/pkg/apis/kubeflow.org/v1"
	"github.com/kubeflow/training-operator/pkg/controller.v1/tensorflow"
	"sigs.k8s.io/yaml"
)

func main() {
	raw, err := io.ReadAll(os.Stdin)
	must(err)
	job := &kubeflowv1.TFJob{}
	must(yaml.UnmarshalStrict(raw, job))
	if job.Namespace == "" {
		job.Namespace = "default" // what the API server sets
	}
	kubeflowv1.SetDefaults_TFJob(job)
	reconciler := &tensorflow.TFJobReconciler{}
	var types []string
	for rtype := range job.Spec.TFReplicaSpecs {
		types = append(types, string(rtype))
	}
	sort.Strings(types)
	for _, rtype := range types {
		spec := job.Spec.TFReplicaSpecs[kubeflowv1.ReplicaType(rtype)]
		for i := int32(0); i < *spec.Replicas; i++ {
			template := spec.Template.DeepCopy()
			rt := strings.ToLower(rtype) // as the common reconciler passes it
			must(reconciler.SetClusterSpec(job, template, rt, fmt.Sprint(i)))
			var value *string
			for _, c := range template.Spec.Containers {
				for _, env := range c.Env {
					if c.Name == kubeflowv1.TFJobDefaultContainerName && env.Name == "TF_CONFIG" {
						v := env.Value
						value = &v
					}
				}
			}
			line, err := json.Marshal(map[string]any{"pod": fmt.Sprintf("%s-%d", rt, i), "tf_config": value})
			must(err)
			fmt.Println(string(line))
		}
	}
}

func must(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
