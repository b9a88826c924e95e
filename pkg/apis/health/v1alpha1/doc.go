// Package v1alpha1 is the health.cozystack.io/v1alpha1 API: the Health object,
// one per component per namespace scope, written only by the cozy-health
// aggregator and read by people, alerts and the drain pre-check.
//
// +kubebuilder:object:generate=true
// +kubebuilder:ac:generate=true
// +kubebuilder:ac:output:package="../../../applyconfiguration"
// +groupName=health.cozystack.io
// +groupGoName=Health
package v1alpha1
