// Package check decodes what the saltus Helm chart renders against
// Kubernetes' own API types, strictly: an unknown or repeated field, a
// wrong type, a quantity that does not parse, an invalid name or label is
// an error, as the API server would answer it. Its own module, so that
// k8s.io/api stays out of saltus's go.mod; make helm-check runs it with
// HELM set to the Helm it built (cmd/saltus TestHelmChart checks the same
// output against saltus's config loader).
package check
