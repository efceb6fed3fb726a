package ratemonitor

import "strings"

// optionError is an error of New that names the option at fault, as New's doc promises:
// "ratemonitor: OPTION: what was wrong". It wraps the cause (errors.Is and errors.As see it);
// the cause's own "ratemonitor: " is dropped so the text does not say it twice.
type optionError struct {
	opt string
	err error
}

func (e *optionError) Error() string {
	return "ratemonitor: " + e.opt + ": " + strings.TrimPrefix(e.err.Error(), "ratemonitor: ")
}

func (e *optionError) Unwrap() error { return e.err }

// optionErr wraps err, from the option named opt (or from checking it in New).
func optionErr(opt string, err error) error { return &optionError{opt: opt, err: err} }
