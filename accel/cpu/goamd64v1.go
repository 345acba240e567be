//go:build !amd64.v3

package cpu

// goamd64v3: see goamd64v3.go.
const goamd64v3 = false
