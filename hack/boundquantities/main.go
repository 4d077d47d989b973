// Command boundquantities tightens the quantity pattern that controller-gen
// writes into a CRD: at most 19 integer and 9 fraction digits, and a decimal
// exponent of at most two digits. The stock pattern admits amounts such as
// 1e-999999999, which pass the API server but take the quantity parser
// forever to read. `make generate` runs it on the AcceleratorQuota CRD.
//
//	go run ./hack/boundquantities config/crd/ome.io_acceleratorquotas.yaml
package main

import (
	"fmt"
	"os"
	"strings"
)

const (
	stock   = `pattern: ^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$`
	bounded = `pattern: ^(\+|-)?(([0-9]{1,19}(\.[0-9]{0,9})?)|(\.[0-9]{1,9}))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?[0-9]{1,2}))?$`
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: boundquantities CRD.yaml")
		os.Exit(2)
	}
	path := os.Args[1]
	data, err := os.ReadFile(path)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	s := string(data)
	n := strings.Count(s, stock)
	if n == 0 && !strings.Contains(s, bounded) {
		fmt.Fprintf(os.Stderr, "%s holds no quantity pattern to bound: has controller-gen changed it? Update this command.\n", path)
		os.Exit(1)
	}
	if err := os.WriteFile(path, []byte(strings.ReplaceAll(s, stock, bounded)), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
