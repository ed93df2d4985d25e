// Package gnet stands in for github.com/panjf2000/gnet/v2 in the analyzers' tests.
package gnet

type Option func()

func WithLockOSThread(bool) Option { return func() {} }

type Conn interface {
	Peek(n int) ([]byte, error)
	Next(n int) ([]byte, error)
}
