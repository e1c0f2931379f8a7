//go:build unix

package config

import "syscall"

func init() {
	signals["USR1"] = syscall.SIGUSR1
	signals["USR2"] = syscall.SIGUSR2
}
