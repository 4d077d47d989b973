// Package flagtest checks a command's options the way its flags set them.
// The unit tests of the manager's and the webhook's options share it; it
// needs nothing but pflag, so those tests stay free of the control plane.
package flagtest

import (
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

// Options is what a command's options offer: their flags, and the check of
// the values those flags set.
type Options interface {
	AddFlags(fs *pflag.FlagSet)
	Validate() error
}

// Validate registers o's flags on a flag set of their own, parses args into
// them (args that do not parse fail the test) and returns what o.Validate
// says of the result.
func Validate(t testing.TB, o Options, args ...string) error {
	t.Helper()
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	o.AddFlags(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	return o.Validate()
}

// WantError fails the test unless err is what want asks for: no error when
// want is "", otherwise an error whose message contains want.
func WantError(t testing.TB, err error, want string) {
	t.Helper()
	switch {
	case want == "" && err != nil:
		t.Fatalf("unexpected error: %v", err)
	case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
		t.Fatalf("error %v, want one containing %q", err, want)
	}
}
