"""The monthly close of each clinic (tenant): once per tenant and month, however often asked."""
