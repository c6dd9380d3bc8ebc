"""`scalelab`: the command line, a client of the REST API (it imports contract/, never server/)."""
