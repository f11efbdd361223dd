"""`aiayn serve`: an HTTP API and a web page to translate, look inside the model and play with the paper's figures."""
