// Package ctxvalue turns a value a framework keeps per request (gin's and
// echo's c.Set) into a rate-limit key, for ginlimit.Key and echolimit.Key.
package ctxvalue

import (
	"fmt"
	"reflect"
	"strconv"

	"github.com/redlimit/redlimit/keyfunc"
)

// Key returns the key "<name>:<value>" of the value v stored under name in
// framework's context ("gin", "echo"). A value that is missing, nil (a nil
// pointer too) or an empty string is an error wrapping keyfunc.ErrNoKey; a
// value of another type than a string, an integer or a fmt.Stringer is an
// error.
func Key(framework, name string, v any) (string, error) {
	var s string
	switch v := v.(type) {
	case nil:
		return "", missing(framework, name)
	case string:
		s = v
	case fmt.Stringer:
		if rv := reflect.ValueOf(v); rv.Kind() == reflect.Pointer && rv.IsNil() {
			return "", missing(framework, name) // and its String may panic
		}
		s = v.String()
	default: // an integer, of any kind or named type
		switch rv := reflect.ValueOf(v); {
		case rv.CanInt():
			s = strconv.FormatInt(rv.Int(), 10)
		case rv.CanUint():
			s = strconv.FormatUint(rv.Uint(), 10)
		default:
			return "", fmt.Errorf("%s context value %q is a %T; a key is made of a string, an integer or a fmt.Stringer", framework, name, v)
		}
	}
	if s == "" {
		return "", fmt.Errorf("%w: %s context value %q is empty", keyfunc.ErrNoKey, framework, name)
	}
	return name + ":" + s, nil
}

func missing(framework, name string) error {
	return fmt.Errorf("%w: no %s context value %q (c.Set it in a handler before the rate limit)", keyfunc.ErrNoKey, framework, name)
}

// Tier returns the tier named by the value v stored under name in
// framework's context, for a rules table's WithTier: a string or a
// fmt.Stringer as it is; "" (the default tier) when the value is missing
// or nil; an error for a value of another type.
func Tier(framework, name string, v any) (string, error) {
	switch v := v.(type) {
	case nil:
		return "", nil
	case string:
		return v, nil
	case fmt.Stringer:
		if rv := reflect.ValueOf(v); rv.Kind() == reflect.Pointer && rv.IsNil() {
			return "", nil
		}
		return v.String(), nil
	}
	return "", fmt.Errorf("%s context value %q is a %T; a tier is a string or a fmt.Stringer", framework, name, v)
}
