module github.com/goroce/goroce

go 1.26.8

require (
	github.com/gopacket/gopacket v1.7.7
	golang.org/x/sys v0.45.0
)

require golang.org/x/net v0.55.0 // indirect
