module github.com/libapf/apf-go

go 1.24
