//go:build amd64.v3

package cpu

// goamd64v3: this build assumes GOAMD64=v3 or higher, where asynchronous
// preemption's saving of vector registers made scalar code after a vector
// kernel 500x slower; the vector kernels stay off.
const goamd64v3 = true
