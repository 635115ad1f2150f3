// Package controlplane holds the integration tests of the control plane as
// cmd/tandem wires it for one instance (the rollout controller, the kill
// switch and the comparator over the control database and the control
// Redis), run as two instances on one control plane. It has no code of its
// own: the tests live here because they span those packages, none of which
// may import the others.
package controlplane
