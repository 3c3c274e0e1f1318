"""Models on disk and by name.

Model directories, conversion to and from Google's and Hugging Face's formats, the Hub. Knows no
job."""
