// Package yamlbound bounds what a YAML document stands for once its aliases are expanded.
//
// A YAML alias (*name) repeats the value its anchor (&name) names. The YAML decoder behind
// sigs.k8s.io/yaml limits aliases by the count of nodes they decode (since CVE-2019-11253),
// not by their bytes: a string of 1 MiB anchored once and aliased a thousand times is a few
// KiB of YAML, one shared string in memory, and a GiB of JSON once converted (as the
// apiserver's YAML serializer, kubeconfig loading and sigs.k8s.io/yaml's YAMLToJSON all do).
// Check measures that expansion before anything converts the document.
package yamlbound
