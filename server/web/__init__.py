"""The pages people use and their forms, over the services the REST API uses too."""
