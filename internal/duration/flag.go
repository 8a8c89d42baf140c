package duration

import (
	"fmt"
	"time"

	"github.com/urfave/cli/v2"
)

// Value is a duration flag's value (a cli.Generic). Its String is Go's form, so c.Duration(name)
// reads it as well; help shows Format's form.
type Value struct {
	d             time.Duration
	allowNegative bool
}

// Set parses s with Parse; a negative duration is rejected unless the flag gives it a meaning.
func (v *Value) Set(s string) error {
	d, err := Parse(s)
	if err != nil {
		return err
	}
	if d < 0 && !v.allowNegative {
		return fmt.Errorf("%q is negative: want 0s or more (%s)", s, Syntax)
	}
	v.d = d
	return nil
}

// String is Go's form (what cli.Context.Duration parses).
func (v *Value) String() string { return v.d.String() }

// Get returns the duration.
func (v *Value) Get() any { return v.d }

// FlagOption changes a duration flag.
type FlagOption func(*cli.GenericFlag, *Value)

// AllowNegative accepts negative values (for a flag that documents what a negative value means).
func AllowNegative() FlagOption {
	return func(_ *cli.GenericFlag, v *Value) { v.allowNegative = true }
}

// Env reads the flag's default from these environment variables.
func Env(vars ...string) FlagOption {
	return func(f *cli.GenericFlag, _ *Value) { f.EnvVars = vars }
}

// Flag is a duration flag that accepts Parse's syntax (7d, 2w, 90s), rejects anything else (and
// negative values) with one line naming the syntax, and shows its default in Format's form.
func Flag(name string, value time.Duration, usage string, opts ...FlagOption) *cli.GenericFlag {
	v := &Value{d: value}
	f := &cli.GenericFlag{Name: name, Value: v, Usage: usage, DefaultText: Format(value)}
	for _, o := range opts {
		o(f, v)
	}
	return f
}
