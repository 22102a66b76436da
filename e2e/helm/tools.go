//go:build tools

// Package tools pins the helm binary built for the chart tests.
package tools

import _ "helm.sh/helm/v3/cmd/helm"
